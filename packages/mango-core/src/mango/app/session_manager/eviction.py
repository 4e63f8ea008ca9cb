"""The idle eviction pass: every Session unused for the idle time loses (or pauses) its sandbox.

The pass only lists candidates (:meth:`~mango.domain.ports.BindingStore.list_idle`)
and runs the ``evict`` command on each through SessionManager, so what
happens to a Session is what the lifecycle table says: the binding is
marked only if it is still unused (an acquire that recorded its use first
keeps it), then the resource is destroyed, or paused where the provider
declares ``pause`` and ``MANGO_EVICT_ACTION`` is ``pause`` (the default).
Nothing is removed on doubt: the
first :class:`~mango.domain.errors.ProviderUnavailable` stops the pass (the
rest waits for the next one), and an eviction whose destroy did not finish
(or whose pause the provider did not confirm) is listed again and finished
next time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import attrs

from mango.domain.errors import InvalidTransition, ProviderUnavailable, SessionDeleting
from mango.domain.ports import BindingStore

__all__ = ["EvictionReport", "evict_idle"]

log = logging.getLogger("mango.app.session_manager")


@attrs.frozen
class EvictionReport:
    """What one eviction pass did."""

    idle_for: float
    attempted: int = 0
    evicted: int = 0
    """Sandboxes taken (newly marked, or an earlier eviction finished): destroyed, or
    paused when ``action`` is ``pause``."""
    kept: int = 0
    """Candidates used (or deleted) since they were listed: left alone."""
    failures: tuple[tuple[str, str], ...] = ()
    """``(session id, error text)`` for each candidate that failed."""
    stopped: str | None = None
    """Why the pass stopped early (the provider became unavailable)."""
    action: str = "destroy"
    """What the pass did to an idle sandbox: ``destroy`` or ``pause``."""

    @property
    def ok(self) -> bool:
        """True when the pass ran to the end and nothing failed."""
        return self.stopped is None and not self.failures


class Evicting(Protocol):
    """The one operation the pass drives, and what it does."""

    @property
    def idle_action(self) -> str:
        """``pause`` where this manager's eviction pauses, else ``destroy``."""
        ...

    async def evict(
        self, session_id: str, *, idle_for: float, deadline: float | None = None
    ) -> bool:
        """Evict the Session's sandbox if it is still unused; True if it was taken."""
        ...


async def evict_idle(  # noqa: PLR0917 - the pass's inputs, as reconcile's passes take them
    manager: Evicting,
    store: BindingStore,
    provider: str,
    idle_for: float,
    limit: int,
    deadline: float | None,
) -> EvictionReport:
    """Evict ``provider``'s Sessions unused for ``idle_for`` seconds (at most ``limit``)."""
    candidates = await store.list_idle(provider, idle_for, limit)
    evicted = kept = 0
    failures: list[tuple[str, str]] = []
    stopped: str | None = None
    for binding in candidates:
        session_id = binding.session_id
        try:
            if await manager.evict(session_id, idle_for=idle_for, deadline=deadline):
                evicted += 1
            else:
                kept += 1
        except asyncio.CancelledError:
            raise
        except (InvalidTransition, SessionDeleting):
            kept += 1  # deleted, or being deleted, since it was listed
        except ProviderUnavailable as exc:
            stopped = f"{type(exc).__name__}: {exc}"
            log.warning("eviction of %s stopped at %s: %s", provider, session_id, stopped)
            failures.append((session_id, stopped))
            break
        except Exception as exc:  # noqa: BLE001 - each failure is isolated and reported
            log.warning("eviction of %s failed: %s", session_id, exc)
            failures.append((session_id, f"{type(exc).__name__}: {exc}"))
    return EvictionReport(
        idle_for=idle_for,
        attempted=evicted + kept + len(failures),
        evicted=evicted,
        kept=kept,
        failures=tuple(failures),
        stopped=stopped,
        action=manager.idle_action,
    )
