"""The caller's deadline for maintenance work, carried in a context variable.

A deadline is an absolute time on the running event loop's clock
(``asyncio.get_running_loop().time()``). SessionManager opens a
:func:`deadline_scope` for each operation that received one (a Temporal
activity passes what remains of its own timeout); maintenance steps inside it
(package setup, a provider's keep-alive or resume) bound their commands with
:func:`maintenance_timeout`, so they never outlive the caller that waits for them.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from mango.domain.values import SandboxSpec

__all__ = [
    "MIN_MAINTENANCE_TIMEOUT",
    "current_deadline",
    "deadline_in",
    "deadline_scope",
    "maintenance_timeout",
    "remaining_time",
]

MIN_MAINTENANCE_TIMEOUT = 0.001
"""What a command gets once the deadline has passed: a timeout must be positive,
and the command should fail at once with ``timed_out`` rather than run unbounded."""

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "mango_deadline", default=None
)


def _now() -> float:
    return asyncio.get_running_loop().time()


def deadline_in(seconds: float) -> float:
    """The absolute deadline ``seconds`` from now on the running loop's clock."""
    return _now() + seconds


def current_deadline() -> float | None:
    """The innermost deadline in effect, or None."""
    return _DEADLINE.get()


@contextmanager
def deadline_scope(deadline: float | None) -> Iterator[float | None]:
    """Make ``deadline`` the one in effect inside the block; yield the effective one.

    A nested scope can only shorten the deadline: the earlier of the enclosing
    and the new one wins. ``None`` keeps the enclosing deadline.
    """
    outer = _DEADLINE.get()
    effective = outer if deadline is None else (deadline if outer is None else min(outer, deadline))
    token = _DEADLINE.set(effective)
    try:
        yield effective
    finally:
        _DEADLINE.reset(token)


def remaining_time() -> float | None:
    """Seconds left until the deadline in effect (may be negative), or None."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - _now()


def maintenance_timeout(spec: SandboxSpec) -> float | None:
    """The timeout for one maintenance command.

    What remains of the caller's deadline, else the spec's default timeout
    (``None``: unbounded). A deadline already passed gives
    :data:`MIN_MAINTENANCE_TIMEOUT`, never zero or a negative value.
    """
    left = remaining_time()
    if left is None:
        return spec.timeout
    return max(left, MIN_MAINTENANCE_TIMEOUT)
