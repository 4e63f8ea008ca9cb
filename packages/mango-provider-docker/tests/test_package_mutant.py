"""The package-setup check catches a Docker sandbox that keeps its setup network.

A mutant whose ``end_package_setup`` does nothing runs the conformance
package check in a child pytest (the suite's verdict is the finding, so it
must not run in this session): the check must fail naming the interface the
sandbox kept. The unchanged provider passes the same check in
``test_conformance.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MUTANT = """
import pytest
from mango.provider import SandboxSpec, TargetCost
from mango.plugins import load_plugins
from mango_conformance import ProviderSuite, SuiteOptions, provider_target
from mango_provider_docker import DockerProvider, DockerSandbox
from mango_provider_docker.settings import open_conformance_testbed


class KeepsItsSetupNetwork(DockerSandbox):
    async def end_package_setup(self) -> None:
        return None  # the defect: the bridge stays connected after setup


class Mutant(DockerProvider):
    def _sandbox(self, session_key, container_id, spec, mounts=None):
        made = super()._sandbox(session_key, container_id, spec, mounts)
        return KeepsItsSetupNetwork(
            ref=made.ref, spec=spec, host_dir=made.host_dir, engine=self.engine,
            max_output_bytes=self.max_output_bytes, max_read_bytes=self.max_read_bytes,
            max_process_log_bytes=self.max_process_log_bytes,
            tracker=self._tracker, background=self._background, mounts=made._mounts,
        )


class TestMutant(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        def factory(scratch):
            return Mutant(scratch / "docker", image={image!r}, namespace="mutant",
                          pull_missing_images=False, extra_labels={labels!r})
        return provider_target("docker", factory, cost=TargetCost.CONTAINER,
                               testbed=open_conformance_testbed)

    @pytest.fixture
    def conformance_options(self):
        registration = load_plugins(entry_points=True).providers().get("docker")
        return SuiteOptions(spec=SandboxSpec(timeout=60.0),
                            declared_capabilities=registration.capabilities)
"""


def test_a_sandbox_that_keeps_its_setup_network_fails_the_package_check(
    test_image: str, tmp_path: Path
) -> None:
    """end_package_setup left out: 'test_package_setup_installs_in_order' fails on eth0."""
    from .conftest import RUN_LABELS

    (tmp_path / "test_mutant.py").write_text(MUTANT.format(image=test_image, labels=RUN_LABELS))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_mutant.py",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_package_setup_installs_in_order",
            "--mango-profile=offline-ci",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output[-3000:]
    assert "1 failed" in output, output[-3000:]
    assert (
        "after the package step: the sandbox's spec says network 'none' but it has the "
        "interfaces ['eth0']" in output
    ), output[-3000:]
