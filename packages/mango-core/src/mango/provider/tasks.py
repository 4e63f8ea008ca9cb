"""Tasks that must finish even when their caller is cancelled (kit helper for providers).

A provider often runs a piece of work in its own task (an exec's event
stream, a start request, a thread that holds a lock) that may not be
abandoned half-way: the command would run on unseen, the lock would be held
behind the caller's back. :func:`settle` waits for such a task to be done
whatever happens to the waiting task meanwhile, and re-raises the waiter's
own cancellation afterwards; :func:`cancel_and_settle` asks the task to stop
first (its cancellation path kills what it started) and then does the same.

Neither raises the task's own outcome: read ``task.result()`` or
``task.exception()`` afterwards (both are then retrieved, so asyncio logs no
"exception was never retrieved" for a task whose outcome the caller ignores).

Stdlib only.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_settle", "settle"]


async def settle(task: asyncio.Future[Any]) -> None:
    """Wait until ``task`` is done, even if we are cancelled meanwhile; then re-raise that.

    ``task`` itself is never cancelled here. Its error is retrieved but not
    raised: the caller reads the outcome from ``task``.
    """
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # never cancels the task itself
        except asyncio.CancelledError:
            cancelled = True
    if not task.cancelled():
        task.exception()  # retrieved: the caller decides what the outcome means
    if cancelled:
        raise asyncio.CancelledError


async def cancel_and_settle(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` unless it is done, then :func:`settle` it (a cancellation of ours is
    re-raised once the task has finished its own cancellation path)."""
    if not task.done():
        task.cancel()
    await settle(task)
