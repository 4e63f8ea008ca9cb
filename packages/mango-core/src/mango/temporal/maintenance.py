"""The workflows beside the Session's: deletion, reconciliation, health. Deterministic.

* :class:`SandboxCleanupWorkflow` (id ``sandbox-cleanup:<session id>``):
  stops the Session workflow, releases the sandbox, deletes the Session row.
* :class:`ReconcilerWorkflow` (id ``mango-reconciler:<task queue>``): one per
  provider, every ``interval``: provisioning intents, then fenced Sessions,
  then the Files store (stalled uploads, outputs' included; unfinished
  deletions; unrecorded blobs).
* :class:`ProviderHealthWorkflow`: the health activity on a provider's worker.

See :mod:`mango.temporal.workflows` for the whole set. Registered names are
stable strings, because recorded histories refer to them.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from mango.temporal._policies import retry_policy
    from mango.temporal.activities import MangoActivities
    from mango.temporal.messages import (
        CleanupInput,
        CleanupOutput,
        DeleteSessionRecordInput,
        FinishDeletionsInput,
        HealthInput,
        ProviderHealth,
        ReconcileInput,
        ReconcileReport,
        ReconcilerInput,
        ReconcilerStatus,
        ReleaseInput,
        StopSessionWorkflowInput,
    )
    from mango.temporal.resource_messages import ReconcileFilesInput, ReconcileFilesOutput
    from mango.temporal.routing import CLEANUP_WORKFLOW, HEALTH_WORKFLOW, RECONCILER_WORKFLOW

__all__ = ["ProviderHealthWorkflow", "ReconcilerWorkflow", "SandboxCleanupWorkflow"]


@workflow.defn(name=CLEANUP_WORKFLOW)
class SandboxCleanupWorkflow:
    """Delete one Session durably: stop its workflow, release its sandbox, delete its row."""

    @workflow.run
    async def run(self, request: CleanupInput) -> CleanupOutput:
        """Run the three steps in order; a non-retryable failure fails this run."""
        policy = request.policy
        start_to_close = timedelta(seconds=max(300.0, policy.stop_grace + 60.0))
        heartbeat = timedelta(seconds=policy.heartbeat_timeout)
        await workflow.execute_activity_method(
            MangoActivities.stop_session_workflow,
            StopSessionWorkflowInput(session_id=request.session_id, grace=policy.stop_grace),
            start_to_close_timeout=start_to_close,
            heartbeat_timeout=heartbeat,
            retry_policy=retry_policy(policy),
            summary="stop session workflow",
        )
        await workflow.execute_activity_method(
            MangoActivities.release_sandbox,
            ReleaseInput(session_id=request.session_id),
            start_to_close_timeout=start_to_close,
            heartbeat_timeout=heartbeat,
            retry_policy=retry_policy(policy),
            summary="release sandbox",
        )
        deleted = await workflow.execute_activity_method(
            MangoActivities.delete_session_record,
            DeleteSessionRecordInput(session_id=request.session_id),
            start_to_close_timeout=start_to_close,
            retry_policy=retry_policy(policy),
            summary="delete session row",
        )
        return CleanupOutput(session_id=request.session_id, deleted=deleted.deleted)


@workflow.defn(name=RECONCILER_WORKFLOW)
class ReconcilerWorkflow:
    """One provider's reconciler: intents, then interrupted deletions, every ``interval``."""

    def __init__(self) -> None:
        """Start with an empty status."""
        self._status = ReconcilerStatus()

    @workflow.run
    async def run(self, request: ReconcilerInput) -> None:
        """Loop for ``passes_per_run`` passes, then continue as new."""
        attempt = timedelta(seconds=request.attempt_timeout)
        heartbeat = timedelta(seconds=request.policy.heartbeat_timeout)
        # A pass gives up quickly: the next pass is the retry.
        retry = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
        for _ in range(request.passes_per_run):
            errors: list[str] = []
            provisioning: ReconcileReport | None = None
            deletions: ReconcileReport | None = None
            try:
                provisioning = await workflow.execute_activity_method(
                    MangoActivities.reconcile_provisioning,
                    ReconcileInput(limit=request.batch),
                    start_to_close_timeout=attempt,
                    heartbeat_timeout=heartbeat,
                    retry_policy=retry,
                    summary="reconcile provisioning",
                )
            except ActivityError as err:
                errors.append(f"reconcile provisioning: {err.cause or err}")
            try:
                deletions = await workflow.execute_activity_method(
                    MangoActivities.finish_deletions,
                    FinishDeletionsInput(
                        limit=request.batch,
                        retry_failed_after=request.retry_failed_after,
                        policy=request.policy,
                    ),
                    start_to_close_timeout=attempt,
                    heartbeat_timeout=heartbeat,
                    retry_policy=retry,
                    summary="finish deletions",
                )
            except ActivityError as err:
                errors.append(f"finish deletions: {err.cause or err}")
            files: ReconcileFilesOutput | None = None
            if workflow.patched("reconcile-files"):
                try:
                    files = await workflow.execute_activity_method(
                        MangoActivities.reconcile_files,
                        ReconcileFilesInput(stale_after=request.file_stale_after),
                        start_to_close_timeout=attempt,
                        heartbeat_timeout=heartbeat,
                        retry_policy=retry,
                        summary="reconcile files",
                    )
                except ActivityError as err:
                    errors.append(f"reconcile files: {err.cause or err}")
            for error in errors:
                workflow.logger.warning("reconciler pass failed: %s", error)
            self._status = ReconcilerStatus(
                passes=self._status.passes + 1,
                provisioning=provisioning,
                deletions=deletions,
                errors=tuple(errors),
                files=files,
            )
            progressed = provisioning is not None and provisioning.completed > 0
            await workflow.sleep(min(0.1, request.interval) if progressed else request.interval)
        workflow.continue_as_new(request)

    @workflow.query(name="Status")
    def status(self) -> ReconcilerStatus:
        """The outcome of the last pass."""
        return self._status


@workflow.defn(name=HEALTH_WORKFLOW)
class ProviderHealthWorkflow:
    """Ask a worker of one provider for its health report."""

    @workflow.run
    async def run(self, request: HealthInput) -> ProviderHealth:
        """Run the health activity once on this task queue."""
        return await workflow.execute_activity_method(
            MangoActivities.provider_health,
            request,
            start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
