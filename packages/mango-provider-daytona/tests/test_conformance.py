"""The whole mango-conformance suite against the fake Daytona (the offline target)."""

from __future__ import annotations

import pytest

from mango.plugins import load_plugins
from mango.provider import ConformanceTarget, SandboxSpec
from mango_conformance import ProviderSuite, SuiteOptions
from mango_provider_daytona import DEFAULT_MAX_OUTPUT_BYTES
from mango_provider_daytona.settings import CONFORMANCE_TARGET

STATE_MACHINE_EXAMPLES = 15
"""Examples of the lifecycle machine per run (every command is a few process spawns in the
fake); deeper runs: ``--mango-max-examples 200 --mango-steps 50``."""
STATE_MACHINE_STEPS = 30


class TestDaytonaProvider(ProviderSuite):
    """The Daytona provider against its fake, through the plugin's own offline target."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return CONFORMANCE_TARGET

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("daytona")
        return SuiteOptions.for_registration(
            registration,
            spec=SandboxSpec(timeout=60.0),
            output_cap=DEFAULT_MAX_OUTPUT_BYTES,
            max_examples=STATE_MACHINE_EXAMPLES,
            stateful_steps=STATE_MACHINE_STEPS,
        )
