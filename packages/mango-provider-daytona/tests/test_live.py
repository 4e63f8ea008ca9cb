"""The conformance suite against a real Daytona account (opt-in: ``MANGO_LIVE_DAYTONA=1``).

Reads the provider's usual settings (``DAYTONA_API_KEY``, ``DAYTONA_API_URL``,
``DAYTONA_TARGET``, ``DAYTONA_IMAGE`` or ``DAYTONA_SNAPSHOT``, ...). Skipped
unless the variable is set; runs the ``live-smoke`` profile. Every sandbox it
creates is destroyed afterwards (leaks are reported by the suite).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.provider import (
    ConformanceTarget,
    ConformanceTestbed,
    NetworkMode,
    PortTestbed,
    ProviderContext,
    SandboxSpec,
)
from mango.provider.ownership import derived_namespace
from mango_conformance import ProviderSuite, SuiteOptions, live_enabled
from mango_provider_daytona import DaytonaProvider
from mango_provider_daytona.settings import REGISTRATION, open_daytona_provider

pytestmark = pytest.mark.live


@contextlib.asynccontextmanager
async def _live_provider(scratch_dir: Path) -> AsyncIterator[DaytonaProvider]:
    namespace = derived_namespace("live", str(scratch_dir))
    provider = open_daytona_provider(ProviderContext(namespace, os.environ))
    try:
        yield provider
    finally:
        await provider.aclose()


LIVE_PORT = 8080
"""The port the live ``exposed-ports`` check serves on (the vendor routes it; nothing is faked)."""


@contextlib.asynccontextmanager
async def _live_testbed(_scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    yield ConformanceTestbed(ports=PortTestbed(port=LIVE_PORT, network=NetworkMode.BRIDGE))


class TestDaytonaLive(ProviderSuite):
    """The real Daytona API and toolbox (billable; opt-in)."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return ConformanceTarget(
            provider="daytona", open=_live_provider, testbed=_live_testbed, description="live"
        )

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        return SuiteOptions.for_registration(
            REGISTRATION,
            live=True,
            spec=SandboxSpec(timeout=120.0),
            prompt_seconds=30.0,
            operation_timeout=600.0,
        )


def test_live_gate_is_off_by_default() -> None:
    """Without MANGO_LIVE_DAYTONA the live suite is skipped (nothing billable runs)."""
    assert isinstance(live_enabled("daytona"), bool)
