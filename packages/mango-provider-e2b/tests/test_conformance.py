"""The whole mango-conformance suite against the fake E2B service (and live E2B, opt-in)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.plugins import load_plugins
from mango.provider import (
    ConformanceTarget,
    ConformanceTestbed,
    NetworkMode,
    PortTestbed,
    SandboxSpec,
)
from mango_conformance import ProviderSuite, SuiteOptions, live_enabled, provider_target
from mango_provider_e2b import E2BProvider, read_e2b_options
from mango_provider_e2b.settings import CONFORMANCE_TARGET

LIVE = live_enabled("e2b")
"""``MANGO_LIVE_E2B=1`` runs the suite against E2B itself (``E2B_API_KEY`` and friends)."""

STATE_MACHINE_EXAMPLES = 20
"""Lifecycle-machine examples per run against the fake: each create is a real HTTP round trip
and a sandbox directory, so the profile's 100 would cost minutes. The flags win:
``--mango-max-examples 100``."""
STATE_MACHINE_STEPS = 30


LIVE_PORT = 8080
"""The port the live ``exposed-ports`` check serves on (E2B routes it; nothing is faked)."""


@contextlib.asynccontextmanager
async def _live_testbed(_scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    yield ConformanceTestbed(ports=PortTestbed(port=LIVE_PORT, network=NetworkMode.BRIDGE))


class TestE2BProvider(ProviderSuite):
    """The e2b provider over its fake passes every check; live E2B with MANGO_LIVE_E2B=1."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        if LIVE:
            return provider_target(
                "e2b",
                lambda _scratch: E2BProvider(read_e2b_options(os.environ), namespace="conformance"),
                testbed=_live_testbed,
            )
        return CONFORMANCE_TARGET

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("e2b")
        return SuiteOptions.for_registration(
            registration,
            spec=SandboxSpec(timeout=120.0 if LIVE else 60.0),
            output_cap=1024 * 1024,
            live=LIVE,
            max_examples=None if LIVE else STATE_MACHINE_EXAMPLES,
            stateful_steps=None if LIVE else STATE_MACHINE_STEPS,
        )
