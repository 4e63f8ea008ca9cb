"""What the worker's activities do to other workflows: stop a Session's, start cleanups.

Used by :class:`~mango.temporal.activities.MangoActivities` (``StopSessionWorkflow``
and ``FinishDeletions``) through the worker's Temporal client.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from mango.app.session_manager import ReconcileReport
from mango.domain.errors import ProviderUnavailable
from mango.domain.ports import BindingStore
from mango.temporal.messages import CleanupInput, FinishDeletionsInput, StopSessionWorkflowOutput
from mango.temporal.routing import (
    CLEANUP_WORKFLOW,
    cleanup_workflow_id,
    route_provider,
    session_workflow_id,
)

__all__ = ["cancel_session_workflow", "start_cleanups"]

_LOG = logging.getLogger("mango.temporal.activities")


async def cancel_session_workflow(
    client: Client, session_id: str, grace: float
) -> StopSessionWorkflowOutput:
    """Cancel the Session's tool workflow and wait until it closed (terminate after ``grace``)."""
    handle = client.get_workflow_handle(session_workflow_id(session_id))

    async def status() -> WorkflowExecutionStatus | None:
        try:
            return (await handle.describe()).status
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return None
            raise ProviderUnavailable(f"Temporal: {exc.message}") from exc

    if await status() is not WorkflowExecutionStatus.RUNNING:
        return StopSessionWorkflowOutput(was_running=False)
    await handle.cancel()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        if await status() is not WorkflowExecutionStatus.RUNNING:
            return StopSessionWorkflowOutput(was_running=True)
        await asyncio.sleep(0.2)
    _LOG.warning("session workflow of %s ignored cancellation; terminating", session_id)
    try:
        await handle.terminate(reason="session deleted; cancellation timed out")
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise ProviderUnavailable(f"Temporal: {exc.message}") from exc
    return StopSessionWorkflowOutput(was_running=True, terminated=True)


async def start_cleanups(
    client: Client,
    store: BindingStore,
    provider: str,
    task_queue: str,
    request: FinishDeletionsInput,
) -> ReconcileReport:
    """Start or join the cleanup workflow of each fenced Session routed to ``provider``.

    A cleanup run that failed less than ``request.retry_failed_after``
    seconds ago is reported, not started again. Each Session is isolated.
    """
    records = await store.list_deleting_sessions(request.limit)
    attempted = started = 0
    failures: list[tuple[str, str]] = []
    for record in records:
        session_id = record.session_id
        try:
            if await route_provider(store, session_id, provider) != provider:
                continue
            attempted += 1
            workflow_id = cleanup_workflow_id(session_id)
            recent = await _recent_failure(client, workflow_id, request.retry_failed_after)
            if recent is not None:
                failures.append((session_id, recent))
                continue
            await client.start_workflow(
                CLEANUP_WORKFLOW,
                CleanupInput(session_id=session_id, policy=request.policy),
                id=workflow_id,
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
            started += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one failing Session must not block the rest
            _LOG.warning("could not start the cleanup of %s: %s", session_id, exc)
            failures.append((session_id, f"{type(exc).__name__}: {exc}"))
    return ReconcileReport(attempted, started, tuple(failures))


async def _recent_failure(client: Client, workflow_id: str, window: float) -> str | None:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    failed = {
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    }
    closed = description.close_time
    if description.status not in failed or closed is None:
        return None
    if datetime.now(UTC) - closed >= timedelta(seconds=window):
        return None
    return (
        f"the last cleanup run {description.status.name.lower()} at {closed.isoformat()}; "
        f"it is retried {window:g} s after that"
    )
