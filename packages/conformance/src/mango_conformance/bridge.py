"""Run async provider calls from synchronous code: one event loop per owner.

Hypothesis rules and the suite's checks are synchronous, while every mango
port is async. An :class:`AsyncBridge` owns one :class:`asyncio.Runner` (so
one event loop) for the life of a check or of one state-machine run; every
provider and sandbox object used by that owner is created and used on that
loop. The loop is never installed as the thread's current loop, so the
bridge does not disturb pytest-asyncio or any other loop of the test session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["AsyncBridge", "SlowOperation"]

T = TypeVar("T")


class SlowOperation(AssertionError):
    """A provider call did not finish within the suite's per-operation bound."""


class AsyncBridge:
    """An event loop that synchronous code drives one awaitable at a time."""

    def __init__(self, operation_timeout: float) -> None:
        self.operation_timeout = operation_timeout
        self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self._closed = False

    def run(self, awaitable: Awaitable[T], what: str, *, timeout: float | None = None) -> T:
        """Run ``awaitable`` to completion and return its result (or raise its error).

        ``what`` names the call in the :class:`SlowOperation` raised if it takes
        longer than ``timeout`` (default: the bridge's per-operation bound).
        """
        limit = self.operation_timeout if timeout is None else timeout
        return self._runner.run(_bounded(awaitable, what, limit))

    def close(self) -> None:
        """Cancel whatever is left on the loop and close it; idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        # Closing must never mask the outcome of the check that used the loop.
        with contextlib.suppress(Exception):
            self._runner.close()


async def _bounded(awaitable: Awaitable[T], what: str, limit: float) -> T:
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():
            raise SlowOperation(f"{what} did not finish within {limit:g} s") from None
        raise
