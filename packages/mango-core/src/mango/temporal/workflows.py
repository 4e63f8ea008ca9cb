"""Deterministic workflows. Everything non-deterministic happens in activities.

* :class:`SessionWorkflow` (id ``session:<session id>``): one per Session;
  tool steps arrive as the ``RunTool`` update and commands as the ``Exec``
  update (``mango exec --via-temporal``: the ``ExecCommand`` activity, with
  the direct path's result), and run one at a time, in the order they were
  accepted; the ``CancelStep`` signal cancels one pending or running ``Exec``
  step (its command is killed), leaving the workflow serving. The first step
  of a run acquires the sandbox (provisioning it durably). A run ends after
  ``idle_timeout`` without a step (the next request starts a new one) and
  continues as new after ``steps_per_run`` steps. Cancelling it cancels the running step and the
  command inside the sandbox. On a provider that takes File Resources each step is preceded
  by the ``MaterializeResources`` activity; on one that publishes outputs the
  ``PublishOutputs`` activity runs once the Session has been quiet for
  ``outputs_quiet_period`` seconds after a step (the acquire's answer says which apply, so
  histories of older runs replay unchanged).
* :class:`SandboxCleanupWorkflow` (id ``sandbox-cleanup:<session id>``): stops
  the Session workflow, releases the sandbox (destroy, binding, intent), then
  deletes the Session row, each step retried durably. Started with id
  conflict policy USE_EXISTING (a repeated delete joins the running cleanup)
  and reuse policy ALLOW_DUPLICATE (a new run may start after a failed one).
* :class:`ReconcilerWorkflow` (id ``mango-reconciler:<task queue>``): one per
  provider; every ``interval`` it reconciles provisioning intents and starts
  the cleanup of fenced Sessions, each step isolated from the other's failure.
* :class:`ProviderHealthWorkflow`: runs the health activity on the worker of a
  provider and returns its report (``mango doctor``).

The last three live in :mod:`mango.temporal.maintenance` and are re-exported
here; :data:`WORKFLOWS` lists all four, and the fleet's scheduled workflows
(the orphan sweep and the idle eviction, :mod:`mango.temporal.fleet_workflows`).

Registered names are stable strings, because recorded histories refer to them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from mango.app.tools import TOOL_NAMES
    from mango.domain.values import ExecResult
    from mango.temporal._policies import retry_policy
    from mango.temporal._step_refusals import STEP_CANCELLED, cancelled_step, workflow_cancelling
    from mango.temporal.activities import MangoActivities
    from mango.temporal.messages import (
        AcquireInput,
        ExecStep,
        ExecStepInput,
        SessionWorkflowInput,
        SessionWorkflowOutput,
        ToolCall,
        ToolResult,
        ToolStepInput,
    )
    from mango.temporal.resource_messages import MaterializeInput, PublishOutputsInput
    from mango.temporal.routing import (
        CANCEL_STEP_SIGNAL,
        EXEC_UPDATE,
        RUN_TOOL_UPDATE,
        SESSION_WORKFLOW,
    )

from mango.temporal.fleet_workflows import FLEET_WORKFLOWS
from mango.temporal.maintenance import (
    ProviderHealthWorkflow,
    ReconcilerWorkflow,
    SandboxCleanupWorkflow,
)

__all__ = [
    "WORKFLOWS",
    "ProviderHealthWorkflow",
    "ReconcilerWorkflow",
    "SandboxCleanupWorkflow",
    "SessionWorkflow",
]

_ABANDONED_KEPT = 64
"""How many cancelled-before-they-came step ids a Session workflow remembers."""
_R = TypeVar("_R")


@workflow.defn(name=SESSION_WORKFLOW)
class SessionWorkflow:
    """The tool workflow of one Session; see the module docstring."""

    @workflow.init
    def __init__(self, request: SessionWorkflowInput) -> None:
        """Set up state before any update handler runs."""
        self._input = request
        self._lock = asyncio.Lock()
        self._acquired = False
        self._materializes = False
        self._publishes = False
        self._unpublished = False
        self._steps = 0
        self._busy = 0
        self._touched = False
        self._cancelled = False
        # A list, not a set: iteration order must be the same on every replay.
        self._running: list[workflow.ActivityHandle[Any]] = []
        self._pending_steps: set[str] = set()  # Exec steps accepted, not finished
        self._cancelled_steps: set[str] = set()
        # Steps cancelled before they came (their client gave up while no worker ran): an
        # update still queued at the server for one of them is refused, never run late.
        self._abandoned: list[str] = []
        self._current_step: str | None = None

    @workflow.run
    async def run(self, request: SessionWorkflowInput) -> SessionWorkflowOutput:
        """Serve tool steps until idle (complete) or long enough (continue as new)."""
        roll = False
        try:
            while True:
                self._touched = False
                quiet = request.outputs_quiet_period if self._unpublished else None
                try:
                    await workflow.wait_condition(
                        lambda: self._touched or self._should_roll(),
                        timeout=timedelta(seconds=quiet or request.idle_timeout),
                        timeout_summary="quiet" if quiet else "idle",
                    )
                except TimeoutError:
                    if self._busy == 0 and self._unpublished:
                        await self._publish()
                        continue
                    if self._busy == 0:
                        break
                    continue
                if self._should_roll():
                    roll = True
                    break
            await workflow.wait_condition(workflow.all_handlers_finished)
            if roll and self._unpublished:
                await self._publish()
        except asyncio.CancelledError:
            self._cancelled = True
            for handle in self._running:
                handle.cancel()
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise
        if roll:
            workflow.continue_as_new(request)
        return SessionWorkflowOutput(steps=self._steps)

    def _should_roll(self) -> bool:
        return self._busy == 0 and (
            self._steps >= self._input.steps_per_run
            or workflow.info().is_continue_as_new_suggested()
        )

    @workflow.update(name=RUN_TOOL_UPDATE)
    async def run_tool(self, call: ToolCall) -> ToolResult:
        """Run one tool step after the steps accepted before it; return its result."""
        self._busy += 1
        self._touched = True
        try:
            async with self._lock:
                if self._cancelled:
                    raise cancelled_step(call.name)
                try:
                    return await self._step(call)
                finally:
                    self._steps += 1
                    self._unpublished = self._publishes
        finally:
            self._busy -= 1
            self._touched = True

    @run_tool.validator
    def _validate_run_tool(self, call: ToolCall) -> None:
        if call.name not in TOOL_NAMES:
            raise ApplicationError(
                f"unknown tool {call.name!r}; the built-in tools are {', '.join(TOOL_NAMES)}",
                type="InvalidInput",
                non_retryable=True,
            )
        if self._cancelled:
            raise workflow_cancelling()

    @workflow.update(name=EXEC_UPDATE)
    async def exec_command(self, step: ExecStep) -> ExecResult:
        """Run one command after the steps accepted before it; return the provider's result."""
        self._busy += 1
        self._touched = True
        self._pending_steps.add(step.step_id)
        try:
            async with self._lock:
                if self._cancelled or step.step_id in self._cancelled_steps:
                    raise cancelled_step("exec")
                self._current_step = step.step_id
                try:
                    return await self._exec_step(step)
                finally:
                    self._current_step = None
                    self._steps += 1
                    self._unpublished = self._publishes
        finally:
            self._pending_steps.discard(step.step_id)
            self._cancelled_steps.discard(step.step_id)
            self._busy -= 1
            self._touched = True

    @exec_command.validator
    def _validate_exec(self, step: ExecStep) -> None:
        if self._cancelled:
            raise workflow_cancelling()
        if step.step_id in self._pending_steps:
            raise ApplicationError(
                f"step {step.step_id!r} is already pending", type="InvalidInput", non_retryable=True
            )
        if step.step_id in self._abandoned:
            raise ApplicationError(
                "the step was cancelled by its client before it started",
                type=STEP_CANCELLED,
                non_retryable=True,
            )

    @workflow.signal(name=CANCEL_STEP_SIGNAL)
    def cancel_step(self, step_id: str) -> None:
        """Cancel one ``Exec`` step: drop it if it still waits, kill its command if it runs."""
        if step_id not in self._pending_steps:
            # Finished already, or not come yet: remember it (a few), so it never starts late.
            self._abandoned = [*self._abandoned[-(_ABANDONED_KEPT - 1) :], step_id]
            return
        self._cancelled_steps.add(step_id)
        if self._current_step == step_id:
            for handle in self._running:
                handle.cancel()

    async def _exec_step(self, step: ExecStep) -> ExecResult:
        policy = self._input.policy
        request = ExecStepInput(
            session_id=self._input.session_id, command=step.command, spec=self._input.spec
        )
        timeout = step.command.timeout or self._input.spec.timeout
        wait = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        try:
            await self._acquire()
            await self._materialize()
            if timeout is not None and timeout <= policy.local_exec_limit:
                # Short and bounded: no server round trip for scheduling and
                # completion. A crash still re-runs it (the workflow task times
                # out and another worker replays it), as a normal activity would.
                return await self._tracked(
                    workflow.start_local_activity_method(
                        MangoActivities.exec_command,
                        request,
                        start_to_close_timeout=timedelta(seconds=timeout + 60.0),
                        retry_policy=retry_policy(policy),
                        cancellation_type=wait,
                        summary="exec (local)",
                    )
                )
            return await self._tracked(
                workflow.start_activity_method(
                    MangoActivities.exec_command,
                    request,
                    start_to_close_timeout=timedelta(seconds=policy.start_to_close),
                    heartbeat_timeout=timedelta(seconds=policy.heartbeat_timeout),
                    retry_policy=retry_policy(policy),
                    cancellation_type=wait,
                    summary="exec",
                )
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise cancelled_step("exec") from err
            raise
        except asyncio.CancelledError as err:
            raise cancelled_step("exec") from err

    async def _acquire(self) -> None:
        """Acquire the sandbox once per run (provisioning it durably on first use)."""
        if self._acquired:
            return
        policy = self._input.policy
        acquired = await self._tracked(
            workflow.start_activity_method(
                MangoActivities.acquire_sandbox,
                AcquireInput(session_id=self._input.session_id, spec=self._input.spec),
                start_to_close_timeout=timedelta(seconds=policy.start_to_close),
                heartbeat_timeout=timedelta(seconds=policy.heartbeat_timeout),
                retry_policy=retry_policy(policy),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary="acquire sandbox",
            )
        )
        self._acquired = True
        self._materializes = acquired.materializes
        self._publishes = acquired.publishes and self._input.outputs_quiet_period is not None

    async def _materialize(self) -> None:
        """Bring the Session's File Resources into its sandbox before a step (if it takes any)."""
        if not self._materializes:
            return
        policy = self._input.policy
        await self._tracked(
            workflow.start_activity_method(
                MangoActivities.materialize_resources,
                MaterializeInput(session_id=self._input.session_id, spec=self._input.spec),
                start_to_close_timeout=timedelta(seconds=policy.start_to_close),
                heartbeat_timeout=timedelta(seconds=policy.heartbeat_timeout),
                retry_policy=retry_policy(policy),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary="materialize resources",
            )
        )

    async def _publish(self) -> None:
        """Publish the Session's outputs once it has been quiet; a failure is logged, not raised.

        A few attempts only: a publication that keeps failing must not hold
        the Session's steps back (the next quiet period tries again).
        """
        self._unpublished = False
        policy = self._input.policy
        async with self._lock:
            if self._cancelled:
                return
            try:
                await self._tracked(
                    workflow.start_activity_method(
                        MangoActivities.publish_outputs,
                        PublishOutputsInput(
                            session_id=self._input.session_id, spec=self._input.spec
                        ),
                        start_to_close_timeout=timedelta(seconds=policy.start_to_close),
                        heartbeat_timeout=timedelta(seconds=policy.heartbeat_timeout),
                        retry_policy=RetryPolicy(
                            initial_interval=timedelta(seconds=policy.initial_retry),
                            maximum_attempts=3,
                        ),
                        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                        summary="publish outputs",
                    )
                )
            except ActivityError as err:
                workflow.logger.warning("publishing the Session's outputs failed: %s", err.cause)

    async def _step(self, call: ToolCall) -> ToolResult:
        policy = self._input.policy
        wait = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        try:
            await self._acquire()
            await self._materialize()
            result = await self._tracked(
                workflow.start_activity_method(
                    MangoActivities.execute_tool,
                    ToolStepInput(
                        session_id=self._input.session_id, call=call, spec=self._input.spec
                    ),
                    start_to_close_timeout=timedelta(seconds=policy.start_to_close),
                    heartbeat_timeout=timedelta(seconds=policy.heartbeat_timeout),
                    retry_policy=retry_policy(policy),
                    cancellation_type=wait,
                    summary=f"tool {call.name}",
                )
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise cancelled_step(call.name) from err
            raise
        except asyncio.CancelledError as err:
            # The workflow's cancellation cancelled this step's activity (see run()).
            raise cancelled_step(call.name) from err
        return result

    async def _tracked(self, handle: workflow.ActivityHandle[_R]) -> _R:
        """Await ``handle``; while it runs, a cancellation of the workflow cancels it."""
        if self._cancelled:
            handle.cancel()
        self._running.append(handle)
        try:
            return await handle
        finally:
            self._running.remove(handle)


WORKFLOWS: tuple[type, ...] = (
    SessionWorkflow,
    SandboxCleanupWorkflow,
    ReconcilerWorkflow,
    ProviderHealthWorkflow,
    *FLEET_WORKFLOWS,
)
"""Every workflow a mango worker registers."""
