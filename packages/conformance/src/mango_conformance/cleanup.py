"""Cleanup shared by the checks and the state machine: destroy, never raise, record leaks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from mango.provider import Provider, Sandbox, SandboxNotFound, SandboxSpec
from mango_conformance.ledger import Leak, LeakLedger

__all__ = ["destroy_or_record", "retire_uncertain"]

T = TypeVar("T")


async def _bounded(awaitable: Awaitable[T], limit: float) -> T:
    async with asyncio.timeout(limit):
        return await awaitable


async def destroy_or_record(
    sandbox: Sandbox,
    key: str,
    *,
    provider_name: str,
    reopen: Callable[[], Awaitable[Provider]],
    spec: SandboxSpec,
    limit: float,
    ledger: LeakLedger,
    where: str,
) -> None:
    """Destroy ``sandbox``; if that fails, attach through a fresh provider and destroy again.

    :class:`SandboxNotFound` at either step counts as gone. Any other failure
    is written to ``ledger``; nothing is raised.
    """
    ref = sandbox.ref
    try:
        await _bounded(sandbox.destroy(), limit)
    except SandboxNotFound:
        return
    except Exception as first:  # noqa: BLE001 - any failure falls back to a fresh client
        try:
            provider = await _bounded(reopen(), limit)
            again = await _bounded(provider.attach(key, ref, spec), limit)
            await _bounded(again.destroy(), limit)
        except SandboxNotFound:
            return
        except Exception as second:  # noqa: BLE001 - recorded as a leak, never raised
            ledger.record(
                Leak(
                    provider_name,
                    key,
                    ref,
                    f"destroy failed ({first!r}) and again through a fresh client ({second!r})",
                    where=where,
                )
            )


async def retire_uncertain(
    uncertain: Iterable[tuple[Provider, str]],
    *,
    spec: SandboxSpec,
    limit: float,
    ledger: LeakLedger,
    where: str,
) -> None:
    """Remove what creates that failed transiently may have left behind.

    Create is idempotent, so creating again finds the resource if it exists;
    it is then destroyed. Failures are recorded, never raised.
    """
    for provider, key in uncertain:
        try:
            sandbox = await _bounded(provider.create(key, spec), limit)
            await _bounded(sandbox.destroy(), limit)
        except Exception as exc:  # noqa: BLE001 - recorded as a leak, never raised
            ledger.record(
                Leak(
                    provider.name,
                    key,
                    None,
                    f"a create failed and cleanup could not confirm nothing is left: {exc!r}",
                    where=where,
                )
            )
