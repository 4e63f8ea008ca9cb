"""Reconciliation: finish or destroy what a crash left, every item attempted.

These passes only call SessionManager's public operations (acquire,
release, delete_session), so what they do is what the lifecycle table says
those operations do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import attrs

from mango.domain.errors import MangoError
from mango.domain.ports import BindingStore, Sandbox
from mango.domain.values import ProvisioningIntent, SandboxSpec, SessionRecord

__all__ = ["ReconcileReport", "finish_deletions", "reconcile_provisioning"]

log = logging.getLogger("mango.app.session_manager")
_Item = TypeVar("_Item")


@attrs.frozen
class ReconcileReport:
    """What one reconciliation pass did; every item was attempted."""

    attempted: int = 0
    completed: int = 0
    failures: tuple[tuple[str, str], ...] = ()
    """``(session id, error text)`` for each item still unresolved."""

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.failures


class SessionOperations(Protocol):
    """The public operations reconciliation drives."""

    async def acquire(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> Sandbox:
        """Return the Session's sandbox, provisioning it on first use."""
        ...

    async def release(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> None:
        """Fence the Session and tear its sandbox down."""
        ...

    async def delete_session(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> bool:
        """Release the sandbox and delete the Session row."""
        ...


async def reconcile_provisioning(
    manager: SessionOperations,
    store: BindingStore,
    provider: str,
    limit: int,
    deadline: float | None,
) -> ReconcileReport:
    """Finish ``provider``'s intents (or destroy them, for fenced Sessions)."""
    intents = await store.list_intents(provider, limit)

    async def settle(intent: ProvisioningIntent) -> None:
        if intent.deleting:
            await manager.release(intent.session_id, deadline=deadline)
        else:
            await manager.acquire(intent.session_id, intent.spec, deadline=deadline)
        if await store.get_intent(intent.session_id) is not None:
            raise MangoError(f"intent of session {intent.session_id!r} remains unresolved")

    return await attempt_each("reconcile", [(i.session_id, i) for i in intents], settle)


async def finish_deletions(
    manager: SessionOperations, store: BindingStore, limit: int, deadline: float | None
) -> ReconcileReport:
    """Finish deletions that were fenced but not completed (after a crash)."""
    records = await store.list_deleting_sessions(limit)

    async def finish(record: SessionRecord) -> None:
        await manager.delete_session(record.session_id, deadline=deadline)

    return await attempt_each("finish deletion of", [(r.session_id, r) for r in records], finish)


async def attempt_each(
    what: str,
    items: list[tuple[str, _Item]],
    action: Callable[[_Item], Awaitable[None]],
) -> ReconcileReport:
    """Run ``action`` on every item; a failure is logged and reported, never stops the rest."""
    completed = 0
    failures: list[tuple[str, str]] = []
    for session_id, item in items:
        try:
            await action(item)
            completed += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - each failure is isolated and reported
            log.warning("%s %s failed: %s", what, session_id, exc)
            failures.append((session_id, f"{type(exc).__name__}: {exc}"))
    return ReconcileReport(len(items), completed, tuple(failures))
