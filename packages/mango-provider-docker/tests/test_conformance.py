"""The whole mango-conformance suite against the real Docker Engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.domain.registry import ConformanceTarget, TargetCost
from mango.domain.values import SandboxSpec
from mango.plugins import load_plugins
from mango_conformance import ProviderSuite, SuiteOptions, provider_target
from mango_provider_docker import DEFAULT_MAX_OUTPUT_BYTES, DockerProvider
from mango_provider_docker.conformance import CONFORMANCE_PORT
from mango_provider_docker.settings import open_conformance_testbed

from .conftest import make_provider

pytestmark = pytest.mark.docker


class TestDockerProvider(ProviderSuite):
    """The Docker provider passes every check, with a timeout that keeps the sandbox."""

    @pytest.fixture
    def conformance_target(self, test_image: str) -> ConformanceTarget:
        def factory(scratch: Path) -> DockerProvider:
            return make_provider(scratch / "docker", test_image, publish_ports=(CONFORMANCE_PORT,))

        # A container target: the profile gives the lifecycle machine its container budget
        # (offline-ci: 20 examples of 40 steps). Deeper runs: --mango-max-examples 200.
        # The package-setup checks use the registered target's testbed: the Debian image
        # with apt and pip sources baked in.
        return provider_target(
            "docker",
            factory,
            description="test daemon, busybox image",
            cost=TargetCost.CONTAINER,
            testbed=open_conformance_testbed,
        )

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("docker")
        return SuiteOptions(
            spec=SandboxSpec(timeout=60.0),
            output_cap=DEFAULT_MAX_OUTPUT_BYTES,
            declared_capabilities=registration.capabilities,
        )
