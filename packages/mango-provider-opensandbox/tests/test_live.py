"""The conformance suite against a real OpenSandbox server: opt-in, ``MANGO_LIVE_OPENSANDBOX=1``.

Reads ``OPEN_SANDBOX_DOMAIN``, ``OPEN_SANDBOX_API_KEY``, ``OPEN_SANDBOX_IMAGE``
and ``OPEN_SANDBOX_USE_SERVER_PROXY`` like the provider does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import mango_conformance
from mango.provider import (
    Capability,
    ConformanceTarget,
    ConformanceTestbed,
    NetworkMode,
    PortTestbed,
    SandboxSpec,
)
from mango.provider.ownership import derived_namespace
from mango_conformance import ProviderSuite, SuiteOptions
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.settings import REGISTRATION, read_settings

LIVE = mango_conformance.live_enabled("opensandbox")
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not LIVE, reason="live OpenSandbox runs need MANGO_LIVE_OPENSANDBOX=1"),
]


@contextlib.asynccontextmanager
async def _live_provider(scratch_dir: Path) -> AsyncIterator[OpenSandboxProvider]:
    settings = read_settings(os.environ)
    provider = OpenSandboxProvider(
        settings.base_url,
        api_key=settings.api_key,
        namespace=derived_namespace("live", str(scratch_dir)),
        server_proxy=settings.server_proxy,
        image=settings.image,
        request_timeout=settings.request_timeout,
    )
    try:
        yield provider
    finally:
        await provider.aclose()


LIVE_PORT = 8080
"""The port the live ``exposed-ports`` check serves on (the vendor routes it; nothing is faked)."""


@contextlib.asynccontextmanager
async def _live_testbed(_scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    yield ConformanceTestbed(ports=PortTestbed(port=LIVE_PORT, network=NetworkMode.BRIDGE))


class TestOpenSandboxLive(ProviderSuite):
    """Skipped unless MANGO_LIVE_OPENSANDBOX=1; then the live-smoke profile."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return ConformanceTarget(
            provider="opensandbox",
            open=_live_provider,
            testbed=_live_testbed,
            waivers={
                Capability.LIMITED_NETWORK: "a live server: no hosts this run serves to probe",
                Capability.PACKAGE_SETUP: "a live image installs from the real registries only",
            },
        )

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        return SuiteOptions.for_registration(
            REGISTRATION, live=True, spec=SandboxSpec(timeout=120.0)
        )
