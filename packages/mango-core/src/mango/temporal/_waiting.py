"""What the client does while a durable step runs: report retries and progress, give up, cancel.

:func:`watch` waits for a step's update and reads the workflow's pending
work once a second:

* an attempt that failed and waits to be retried is reported to the caller
  (:class:`Waiting`) and counts towards ``max_wait``;
* work no worker picks up (a workflow task or an activity still scheduled
  after :data:`PICKUP_GRACE` seconds: the queue's worker stopped, though the
  server still lists it as a recent poller) is reported the same way and
  counts towards ``max_wait`` too, so a step never waits silently;
* a running activity's heartbeat detail (what a package setup installs) is
  handed to ``on_progress``.

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
from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from mango.domain.values import ExecResult
from mango.temporal.routing import CANCEL_STEP_SIGNAL

__all__ = ["PICKUP_GRACE", "Waiting", "cancel_step", "watch"]

_WATCH_INTERVAL = 1.0
_CANCEL_GRACE = 30.0
PICKUP_GRACE = 3.0
"""Seconds a workflow task or activity may stay scheduled before no worker picking it up is
reported (a live worker picks work up within milliseconds)."""


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
    unclaimed: bool = False
    """True when nothing failed: no worker picked the work up (``reason`` says where)."""

    def describe(self) -> str:
        """One line for a terminal."""
        if self.unclaimed:
            return f"waiting: {self.reason}; giving up in {max(self.give_up_in, 0):.0f} s"
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
    *,
    on_progress: Callable[[str], None] | None = None,
) -> str | None:
    """Wait for ``update``; None when it is done, else why the client gives up.

    Once a second, while it runs, the workflow's pending work is read (see
    the module docstring): failed attempts and unclaimed work are reported
    (each new one once) and count towards ``max_wait``; heartbeat progress
    goes to ``on_progress``. A fast step never pays for a describe call.
    """
    loop = asyncio.get_running_loop()
    since: float | None = None
    reported, progress = "", ""
    while True:
        done, _ = await asyncio.wait({update}, timeout=_WATCH_INTERVAL)
        if done:
            return None
        try:
            description = await handle.describe()
        except RPCError:
            continue  # a passing hiccup: the update itself reports real failures
        raw = description.raw_description
        if on_progress is not None:
            line = await _progress(client, raw.pending_activities)
            if line and line != progress:
                progress = line
                on_progress(line)
        found = await _failing(client, raw) or _unclaimed(raw)
        if found is None:
            since = None
            continue
        key, waiting = found
        now = loop.time()
        since = now if since is None else since
        if now - since >= max_wait:
            return waiting.reason
        if on_wait is not None and key != reported:
            reported = key
            on_wait(attrs.evolve(waiting, waited=now - since, give_up_in=max_wait - (now - since)))


async def _failing(client: Client, raw: Any) -> tuple[str, Waiting] | None:
    """The first activity whose last attempt failed, as a report (and its key), or None."""
    failing = [p for p in raw.pending_activities if p.last_failure.message]
    if not failing:
        return None
    pending = failing[0]
    failure = await client.data_converter.decode_failure(pending.last_failure)
    reason = getattr(failure, "message", "") or str(failure) or type(failure).__name__
    retry_in = None
    if pending.HasField("next_attempt_schedule_time"):
        at = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
        retry_in = max((at - datetime.now(UTC)).total_seconds(), 0.0)
    waiting = Waiting(
        activity=_activity_name(pending),
        attempt=pending.attempt,
        reason=reason,
        retry_in=retry_in,
        waited=0.0,
        give_up_in=0.0,
    )
    return f"{pending.activity_id}:{pending.attempt}", waiting


def _unclaimed(raw: Any) -> tuple[str, Waiting] | None:
    """Work scheduled for longer than :data:`PICKUP_GRACE` that no worker took, or None."""
    queue = raw.execution_config.task_queue.name or "its task queue"
    now = datetime.now(UTC)
    candidates: list[tuple[str, Any]] = []
    task = raw.pending_workflow_task
    if (
        raw.HasField("pending_workflow_task")
        and task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
    ):
        candidates.append(("the step", task.original_scheduled_time or task.scheduled_time))
    candidates.extend(
        (_activity_name(p), p.scheduled_time)
        for p in raw.pending_activities
        if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        and not p.last_failure.message
    )
    for what, scheduled in candidates:
        waited = (now - scheduled.ToDatetime(tzinfo=UTC)).total_seconds()
        if waited >= PICKUP_GRACE:
            reason = (
                f"no worker has picked up {what} from task queue {queue!r} for {waited:.0f} s "
                "(its worker stopped or is stuck)"
            )
            waiting = Waiting(
                activity=what,
                attempt=0,
                reason=reason,
                retry_in=None,
                waited=0.0,
                give_up_in=0.0,
                unclaimed=True,
            )
            return f"unclaimed:{what}", waiting
    return None


async def _progress(client: Client, pending_activities: Any) -> str:
    """The latest progress line a running activity sent in its heartbeat, or ``""``."""
    for pending in pending_activities:
        if not pending.heartbeat_details.payloads:
            continue
        try:
            values = await client.data_converter.decode(pending.heartbeat_details.payloads)
        except Exception:  # noqa: BLE001, S112 - an unreadable detail is no progress, not a failure
            continue
        lines = [value for value in values if isinstance(value, str)]
        if lines:
            return lines[-1]
    return ""


def _activity_name(pending: Any) -> str:
    name = str(pending.activity_type.name)
    return {"AcquireSandbox": "acquire sandbox", "ExecCommand": "exec"}.get(name, name)


async def cancel_step(
    handle: WorkflowHandle[Any, Any],
    step_id: str,
    update: asyncio.Future[ExecResult],
    *,
    grace: float = _CANCEL_GRACE,
) -> None:
    """Cancel the step and wait (at most ``grace`` s) until the workflow reports it gone.

    Shielded from our own cancellation: a Ctrl-C or SIGTERM is exactly when
    the command must be killed before the client exits. A step no worker
    picked up has nothing running to wait for (``grace=0``): the signal
    alone makes the workflow refuse it if it is delivered later.
    """

    async def cancel() -> None:
        if not update.done():
            with contextlib.suppress(RPCError):
                await handle.signal(CANCEL_STEP_SIGNAL, step_id)
            await asyncio.wait({update}, timeout=grace)
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
