"""The leak ledger: sandboxes and clients that a check could not clean up.

Cleanup never raises (it would hide the failure that matters); it writes here
instead. The pytest plugin prints the ledger at the end of the run, and
``--mango-strict`` turns any entry into a failed run.
"""

from __future__ import annotations

import threading

import attrs

from mango.provider import SandboxRef

__all__ = ["Leak", "LeakLedger", "current_ledger", "set_current_ledger"]


@attrs.frozen
class Leak:
    """One thing that may still exist at the provider after a check."""

    provider: str
    session_key: str
    ref: SandboxRef | None
    detail: str
    where: str = ""
    """The check (pytest node id) or machine run that left it."""

    def describe(self) -> str:
        """One line for the terminal summary."""
        ref = str(self.ref) if self.ref is not None else "no ref"
        where = f" [{self.where}]" if self.where else ""
        return f"{self.provider} key={self.session_key!r} {ref}: {self.detail}{where}"


@attrs.define
class LeakLedger:
    """A thread-safe list of :class:`Leak` entries."""

    _entries: list[Leak] = attrs.field(factory=list, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def record(self, leak: Leak) -> None:
        """Add one entry."""
        with self._lock:
            self._entries.append(leak)

    @property
    def entries(self) -> tuple[Leak, ...]:
        """Every entry so far, oldest first."""
        with self._lock:
            return tuple(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


_current = LeakLedger()


def current_ledger() -> LeakLedger:
    """The ledger of the running pytest session (or a process-wide one outside pytest)."""
    return _current


def set_current_ledger(ledger: LeakLedger) -> LeakLedger:
    """Make ``ledger`` current and return the previous one (the plugin restores it)."""
    global _current  # one ledger per pytest session, swapped by the plugin
    previous, _current = _current, ledger
    return previous
