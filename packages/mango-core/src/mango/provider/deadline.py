"""The caller's deadline for maintenance work (kit helper for providers).

A provider that runs maintenance inside an operation (resuming a paused
sandbox in ``keep_alive``, a package command, a long attach) bounds it with
:func:`maintenance_timeout` so it never outlives the caller's deadline.
SessionManager opens the :func:`deadline_scope`; providers only read it.
"""

from __future__ import annotations

from mango.domain.deadline import (
    MIN_MAINTENANCE_TIMEOUT,
    current_deadline,
    deadline_in,
    deadline_scope,
    maintenance_timeout,
    remaining_time,
)

__all__ = [
    "MIN_MAINTENANCE_TIMEOUT",
    "current_deadline",
    "deadline_in",
    "deadline_scope",
    "maintenance_timeout",
    "remaining_time",
]
