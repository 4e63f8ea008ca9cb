"""A mutant: a Daytona provider whose exposed port loses its preview token fails the check.

The ``exposed-ports`` conformance check must fetch with the headers an
``ExposedPort`` carries; a provider that drops them (the token a private
Daytona sandbox needs) must fail it, or the check proves nothing about them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import SandboxWrapper
from mango.plugins import load_plugins
from mango.provider import ConformanceTarget, ExposedPort, SandboxSpec
from mango_conformance import ProviderSuite, SuiteOptions
from mango_conformance.checks.pause import PortChecks
from mango_provider_daytona.settings import CONFORMANCE_TARGET


@attrs.define
class _Tokenless(SandboxWrapper):
    async def expose_port(self, port: int) -> ExposedPort:
        exposed: ExposedPort = await self.inner.expose_port(port)  # type: ignore[attr-defined]
        return ExposedPort(exposed.url)  # the token is dropped


@attrs.define
class _TokenlessProvider:
    inner: Any

    async def create(self, session_key: str, spec: SandboxSpec) -> Any:
        return _Tokenless(await self.inner.create(session_key, spec))

    async def attach(self, session_key: str, ref: Any, spec: SandboxSpec) -> Any:
        return _Tokenless(await self.inner.attach(session_key, ref, spec))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.asynccontextmanager
async def _open_tokenless(scratch_dir: Path) -> AsyncIterator[Any]:
    async with CONFORMANCE_TARGET.open(scratch_dir) as provider:
        yield _TokenlessProvider(provider)


class TestTokenlessDaytona(PortChecks):
    """Only the exposed-ports check, on the mutant: it must fail."""

    pytestmark = pytest.mark.mango_conformance
    conformance = ProviderSuite.conformance

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return attrs.evolve(CONFORMANCE_TARGET, open=_open_tokenless)

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=True).providers().get("daytona")
        return SuiteOptions.for_registration(registration, spec=SandboxSpec(timeout=60.0))

    @pytest.mark.xfail(strict=True, reason="the mutant drops the token", raises=AssertionError)
    def test_exposed_port_reaches_a_server_in_the_sandbox(self, conformance: Any) -> None:
        """The inherited check, on the mutant."""
        super().test_exposed_port_reaches_a_server_in_the_sandbox(conformance)
