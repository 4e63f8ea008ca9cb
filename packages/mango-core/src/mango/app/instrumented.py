"""A provider wrapper that times and traces every provider call (:mod:`mango.app.telemetry`).

:func:`instrument` wraps a provider once, in the composition root; the
SessionManager and the sweep then run on it unchanged. The wrapper offers
exactly the optional operations the wrapped provider offers (``purge``,
``destroy_owned``), so ``isinstance`` checks against
:class:`~mango.domain.ports.PurgingProvider` and
:class:`~mango.domain.fleet.SweepableProvider` answer as for the provider
itself. Sandboxes it returns time their ``exec`` (and ``exec_step``, one exec
however many calls it makes inside) and ``destroy`` and count output
truncations; every other sandbox operation (and the optional
capability operations) passes through untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs

from mango.app import telemetry
from mango.app.wrappers import SandboxWrapper
from mango.domain.capabilities import CapabilitySet
from mango.domain.fleet import SweepableProvider
from mango.domain.ports import Provider, PurgingProvider, Sandbox, StepSandbox
from mango.domain.sandbox_ports import StepKey
from mango.domain.values import Command, ExecResult, OwnedResource, SandboxRef, SandboxSpec

__all__ = ["InstrumentedProvider", "InstrumentedSandbox", "instrument"]


@attrs.define
class InstrumentedSandbox(SandboxWrapper):
    """A sandbox whose exec and destroy are timed, traced and counted."""

    provider: str = attrs.field(kw_only=True)

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command``; its latency and any output truncation are recorded."""
        async with telemetry.provider_call(self.provider, "exec"):
            result = await self.inner.exec(command)
        telemetry.record_exec(self.provider, result)
        return result

    async def exec_step(
        self, key: StepKey, command: Command, *, timeout: float | None
    ) -> ExecResult:
        """Run ``command`` once for ``key`` (the wrapped sandbox must offer it): one exec,
        timed and counted as exec is."""
        async with telemetry.provider_call(self.provider, "exec"):
            result = await cast("StepSandbox", self.inner).exec_step(key, command, timeout=timeout)
        telemetry.record_exec(self.provider, result)
        return result

    async def destroy(self) -> None:
        """Destroy the wrapped sandbox, timed."""
        async with telemetry.provider_call(self.provider, "destroy"):
            await self.inner.destroy()


@attrs.define
class InstrumentedProvider:
    """Delegates every :class:`~mango.domain.ports.Provider` call to ``inner``, timed and traced."""

    inner: Provider

    @property
    def name(self) -> str:
        """The wrapped provider's name."""
        return self.inner.name

    @property
    def capabilities(self) -> CapabilitySet:
        """The wrapped provider's capabilities."""
        return self.inner.capabilities

    def _wrap(self, sandbox: Sandbox) -> Sandbox:
        return InstrumentedSandbox(sandbox, provider=self.inner.name)

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        """Create (timed)."""
        async with telemetry.provider_call(self.name, "create", session_key):
            return self._wrap(await self.inner.create(session_key, spec))

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        """Attach (timed)."""
        async with telemetry.provider_call(self.name, "attach", session_key):
            return self._wrap(await self.inner.attach(session_key, ref, spec))

    async def find(self, session_key: str) -> SandboxRef | None:
        """Find (timed)."""
        async with telemetry.provider_call(self.name, "find", session_key):
            return await self.inner.find(session_key)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Destroy (timed)."""
        async with telemetry.provider_call(self.name, "destroy", session_key):
            await self.inner.destroy(session_key, ref)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """List this namespace's resources (timed)."""
        async with telemetry.provider_call(self.name, "list_owned"):
            return await self.inner.list_owned()

    async def health(self) -> str:
        """Health round trip (timed)."""
        async with telemetry.provider_call(self.name, "health"):
            return await self.inner.health()

    async def aclose(self) -> None:
        """Close the wrapped provider."""
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (during construction): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class _Purging(InstrumentedProvider):
    async def purge(self, session_key: str, *, force: bool = False) -> None:
        """Purge (timed)."""
        assert isinstance(self.inner, PurgingProvider)  # noqa: S101 - chosen by instrument()
        async with telemetry.provider_call(self.name, "purge", session_key):
            await self.inner.purge(session_key, force=force)


class _Sweeping(InstrumentedProvider):
    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Remove a listed resource (timed)."""
        assert isinstance(self.inner, SweepableProvider)  # noqa: S101 - chosen by instrument()
        async with telemetry.provider_call(self.name, "destroy_owned"):
            await self.inner.destroy_owned(resource)


class _PurgingSweeping(_Purging, _Sweeping):
    pass


def instrument(provider: Provider) -> Provider:
    """``provider``, wrapped so that every call is timed and traced (idempotent)."""
    if isinstance(provider, InstrumentedProvider):
        return provider
    purging = isinstance(provider, PurgingProvider)
    sweeping = isinstance(provider, SweepableProvider)
    kind = {
        (False, False): InstrumentedProvider,
        (True, False): _Purging,
        (False, True): _Sweeping,
        (True, True): _PurgingSweeping,
    }[(purging, sweeping)]
    return kind(provider)
