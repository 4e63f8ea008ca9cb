"""The whole mango-conformance suite against the fake OpenSandbox, through the plugin's target."""

from __future__ import annotations

import pytest

from mango.plugins import load_plugins
from mango.provider import ConformanceTarget, SandboxSpec
from mango_conformance import ProviderSuite, SuiteOptions
from mango_provider_opensandbox.settings import CONFORMANCE_TARGET

STATE_MACHINE_EXAMPLES = 15
"""Examples of the lifecycle machine per run: each step is a few HTTP round trips and a
process start; deeper runs: ``--mango-max-examples 100 --mango-steps 40``."""
STATE_MACHINE_STEPS = 25


class TestOpenSandboxProvider(ProviderSuite):
    """The provider on its fake server, alternating server proxy and direct endpoints."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return CONFORMANCE_TARGET

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("opensandbox")
        return SuiteOptions.for_registration(
            registration,
            spec=SandboxSpec(timeout=60.0),
            output_cap=1024 * 1024,
            max_examples=STATE_MACHINE_EXAMPLES,
            stateful_steps=STATE_MACHINE_STEPS,
        )
