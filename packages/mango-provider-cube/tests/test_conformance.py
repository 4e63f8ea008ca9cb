"""The whole mango-conformance suite against the fake in Cube mode (live CubeSandbox opt-in)."""

from __future__ import annotations

import os

import pytest

from mango.plugins import load_plugins
from mango.provider import ConformanceTarget, SandboxSpec
from mango_conformance import ProviderSuite, SuiteOptions, live_enabled, provider_target
from mango_provider_cube import read_cube_options
from mango_provider_cube.settings import CONFORMANCE_TARGET
from mango_provider_e2b import E2BProvider

LIVE = live_enabled("cube")
"""``MANGO_LIVE_CUBE=1`` runs the suite against CubeSandbox (``CUBE_API_URL``, ...)."""

STATE_MACHINE_EXAMPLES = 20
"""Lifecycle-machine examples per run against the fake: each create is a real HTTP round trip
and a sandbox directory, so the profile's 100 would cost minutes. The flags win:
``--mango-max-examples 100``."""
STATE_MACHINE_STEPS = 30


class TestCubeProvider(ProviderSuite):
    """The cube provider over its fake passes every check; live Cube with MANGO_LIVE_CUBE=1."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        if LIVE:
            return provider_target(
                "cube",
                lambda _scratch: E2BProvider(
                    read_cube_options(os.environ), namespace="conformance"
                ),
            )
        return CONFORMANCE_TARGET

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("cube")
        return SuiteOptions.for_registration(
            registration,
            spec=SandboxSpec(timeout=120.0 if LIVE else 60.0),
            output_cap=1024 * 1024,
            live=LIVE,
            max_examples=None if LIVE else STATE_MACHINE_EXAMPLES,
            stateful_steps=None if LIVE else STATE_MACHINE_STEPS,
        )
