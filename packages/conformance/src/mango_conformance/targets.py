"""Targets: how the suite obtains fresh providers of one deployment.

The currency is :class:`mango.domain.registry.ConformanceTarget`: ``open(scratch_dir)``
is an async context manager that yields a *fresh* provider each time it is
entered, and a provider from a later entry must attach to what earlier ones
created (a simulated worker restart). Plugins register the same objects for
``mango-conformance run NAME``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from mango.provider import (
    Capability,
    ConformanceTarget,
    ConformanceTestbed,
    Provider,
    TargetCost,
)

__all__ = ["as_target", "provider_target"]


def provider_target(
    name: str,
    factory: Callable[[Path], Provider | Awaitable[Provider]],
    *,
    description: str = "",
    cost: TargetCost = TargetCost.PROCESS,
    testbed: Callable[[Path], AbstractAsyncContextManager[ConformanceTestbed]] | None = None,
    waivers: Mapping[Capability | str, str] | None = None,
) -> ConformanceTarget:
    """Build a target from a factory ``factory(scratch_dir) -> Provider`` (sync or async).

    Every entry calls the factory again and closes the provider with
    ``aclose()`` on exit. The factory must return providers of the *same
    deployment*: for a local-style provider, one over a directory under
    ``scratch_dir``; for a fake service, one sharing the fake's state.
    ``cost`` sizes the lifecycle machine's default budget
    (:class:`~mango.provider.TargetCost`); ``testbed`` and ``waivers`` are
    the target's (see :class:`~mango.provider.ConformanceTarget`).
    """

    @contextlib.asynccontextmanager
    async def open_provider(scratch_dir: Path) -> AsyncIterator[Provider]:
        made = factory(scratch_dir)
        provider: Provider = await made if inspect.isawaitable(made) else made
        try:
            yield provider
        finally:
            await provider.aclose()

    return ConformanceTarget(
        provider=name,
        open=open_provider,
        description=description,
        cost=cost,
        testbed=testbed,
        waivers=waivers or {},
    )


def as_target(value: object) -> ConformanceTarget:
    """Return ``value`` if it is a :class:`ConformanceTarget`, else raise a helpful TypeError."""
    if isinstance(value, ConformanceTarget):
        return value
    raise TypeError(
        "the conformance_target fixture must return a mango.domain.registry.ConformanceTarget "
        f"(got {type(value).__name__}); build one with "
        "mango_conformance.provider_target(name, factory) or reuse your plugin's target"
    )
