"""What the client does while a durable step runs: report retries, give up, cancel.

:func:`watch` waits for a step's update and reads the workflow's pending
activities once a second: an attempt that failed and waits to be retried is
reported to the caller (:class:`Waiting`) and counts towards ``max_wait``.
:func:`cancel_step` signals the workflow to cancel the step and waits,
shielded, until it is gone, so a Ctrl-C never leaves a command running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from mango.domain.values import ExecResult
from mango.temporal.routing import CANCEL_STEP_SIGNAL

__all__ = ["Waiting", "cancel_step", "watch"]

_WATCH_INTERVAL = 1.0
_CANCEL_GRACE = 30.0


@attrs.frozen
class Waiting:
    """What a step waits for: an activity that failed and is being retried.

    Reported to :meth:`Orchestrator.exec`'s ``on_wait`` each time a new
    attempt has failed, so a person sees why nothing happens yet.
    """

    activity: str
    """What is retried (the activity's summary, e.g. ``acquire sandbox``)."""
    attempt: int
    """The attempt that will run next."""
    reason: str
    """The last attempt's failure, as the worker reported it."""
    retry_in: float | None
    """Seconds until the next attempt, if the server said."""
    waited: float
    """Seconds since the first failed attempt this client saw."""
    give_up_in: float
    """Seconds left before the client gives up."""

    def describe(self) -> str:
        """One line for a terminal."""
        retry = f"; retrying in {self.retry_in:.0f} s" if self.retry_in is not None else ""
        return (
            f"waiting: {self.activity} failed (attempt {self.attempt - 1}): {self.reason}"
            f"{retry}; giving up in {max(self.give_up_in, 0):.0f} s"
        )


async def watch(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    update: asyncio.Future[ExecResult],
    max_wait: float,
    on_wait: Callable[[Waiting], None] | None,
) -> str | None:
    """Wait for ``update``; None when it is done, else why the client gives up.

    Once a second, while it runs, the workflow's pending activities are
    read: one that failed and waits for its next attempt makes the client
    report (each new attempt once) and counts towards ``max_wait``. A fast
    step never pays for a describe call.
    """
    loop = asyncio.get_running_loop()
    since: float | None = None
    reported = ""
    while True:
        done, _ = await asyncio.wait({update}, timeout=_WATCH_INTERVAL)
        if done:
            return None
        try:
            description = await handle.describe()
        except RPCError:
            continue  # a passing hiccup: the update itself reports real failures
        failing = [
            p for p in description.raw_description.pending_activities if p.last_failure.message
        ]
        if not failing:
            since = None
            continue
        pending = failing[0]
        now = loop.time()
        since = now if since is None else since
        failure = await client.data_converter.decode_failure(pending.last_failure)
        reason = getattr(failure, "message", "") or str(failure) or type(failure).__name__
        if now - since >= max_wait:
            return reason
        key = f"{pending.activity_id}:{pending.attempt}"
        if on_wait is not None and key != reported:
            reported = key
            retry_in = None
            if pending.HasField("next_attempt_schedule_time"):
                at = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
                retry_in = max((at - datetime.now(UTC)).total_seconds(), 0.0)
            on_wait(
                Waiting(
                    activity=_activity_name(pending),
                    attempt=pending.attempt,
                    reason=reason,
                    retry_in=retry_in,
                    waited=now - since,
                    give_up_in=max_wait - (now - since),
                )
            )


def _activity_name(pending: Any) -> str:
    name = str(pending.activity_type.name)
    return {"AcquireSandbox": "acquire sandbox", "ExecCommand": "exec"}.get(name, name)


async def cancel_step(
    handle: WorkflowHandle[Any, Any], step_id: str, update: asyncio.Future[ExecResult]
) -> None:
    """Cancel the step and wait (bounded) until the workflow reports it gone.

    Shielded from our own cancellation: a Ctrl-C or SIGTERM is exactly when
    the command must be killed before the client exits.
    """

    async def cancel() -> None:
        if not update.done():
            with contextlib.suppress(RPCError):
                await handle.signal(CANCEL_STEP_SIGNAL, step_id)
            await asyncio.wait({update}, timeout=_CANCEL_GRACE)
        if not update.done():
            update.cancel()
        with contextlib.suppress(BaseException):
            await update

    task = asyncio.ensure_future(cancel())
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue  # already cancelling; a second signal must not leave the command running
