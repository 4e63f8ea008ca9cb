"""How one activity attempt runs: its errors translated once, its deadline, its heartbeats.

Every activity of :class:`~mango.temporal.activities.MangoActivities` awaits
its work through :func:`boundary` (mango errors become Temporal failures on
the way out) and, when it may take long, :func:`heartbeating` (the command in
the sandbox is cancelled with the activity). :func:`activity_deadline` hands
what remains of the attempt's timeouts to SessionManager's maintenance.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from mango.domain.deadline import deadline_in
from mango.domain.errors import MangoError
from mango.domain.progress import progress_scope
from mango.temporal.failures import to_application_error

__all__ = ["activity_deadline", "boundary", "heartbeating"]

_LOG = logging.getLogger("mango.temporal.activities")
_T = TypeVar("_T")


async def boundary(work: Awaitable[_T]) -> _T:
    """Await ``work``, translating mango errors into Temporal failures once.

    A retryable failure is sent without the exceptions it was raised from:
    the server keeps an activity's last failure (what a waiting client shows)
    only if it is small (a few KiB), and the chain's stack traces are not.
    It is logged here in full instead. A final failure keeps its chain.
    """
    try:
        return await work
    except ApplicationError:
        raise
    except MangoError as exc:
        failure = to_application_error(exc)
        if failure.non_retryable:
            raise failure from exc
        _LOG.warning("attempt failed, to be retried: %s", exc, exc_info=exc)
        raise failure from None


def activity_deadline() -> float | None:
    """What remains of this activity's own timeouts, as a deadline for SessionManager.

    Maintenance inside the activity (package setup, a provider's resume) must
    end before Temporal gives up on the attempt. None outside an activity.
    """
    try:
        info = activity.info()
    except RuntimeError:
        return None
    ends = [
        start + timeout
        for start, timeout in (
            (info.started_time, info.start_to_close_timeout),
            (info.scheduled_time, info.schedule_to_close_timeout),
        )
        if timeout
    ]
    if not ends:
        return None
    return deadline_in((min(ends) - datetime.now(UTC)).total_seconds())


async def heartbeating(work: Coroutine[Any, Any, _T], interval: float) -> _T:
    """Run ``work`` while heartbeating; if we are cancelled, cancel it and wait for it.

    The latest progress line ``work`` reports (:func:`mango.domain.progress.report_progress`:
    what a package setup installs) is the heartbeat's detail, which a client
    watching the step prints. A local activity does not heartbeat (it has no
    heartbeat timeout: the workflow task it runs in is what times out if the
    worker dies).
    """
    progress: list[str] = []
    with progress_scope(progress.append):  # the task takes the scope with its context
        task = asyncio.ensure_future(work)
    beat = not activity.info().is_local
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if beat:
                activity.heartbeat(*progress[-1:])
                del progress[:-1]
    finally:
        if not task.done():
            task.cancel()
            # The command must be gone before the activity reports its cancellation.
            await asyncio.wait({task})
