"""The client side of the durable path: routing, tool steps, deletion, worker health.

:class:`Orchestrator` is what ``mango exec --via-temporal``, ``mango sessions
delete --via-temporal`` and ``mango doctor`` use. It needs the BindingStore
(to create and fence Sessions and to route them) and a Temporal client, never
a provider or its credentials: those live only on workers.

Deletion is: fence the Session in PostgreSQL (no new admissions from then
on), then start or join the deterministic cleanup workflow on the queue of
the provider that holds the Session, and wait for it. If the client dies
after the fence, a worker's reconciler finds the fenced Session and finishes.

Over 400 lines on purpose: this is the whole client side of the workflows in
one place, each operation next to the error translation it shares with the
others (RPC failures, a failed workflow task from mismatched payload keys, no
worker polling the queue, with the hint to start one); waiting on a step,
routing and the error mapping already live in :mod:`mango.temporal._waiting`,
:mod:`mango.temporal.routing` and :mod:`mango.temporal.failures`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import attrs
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import TimeoutError as TimeoutError_
from temporalio.service import RPCError, RPCStatusCode

from mango.app.admission import admit_environment
from mango.app.tools import parse_arguments
from mango.config import PAYLOAD_KEYS_ENV, PayloadKey
from mango.domain.capabilities import CapabilitySet
from mango.domain.errors import ConfigurationError, ProviderUnavailable, SessionDeleting
from mango.domain.ports import BindingStore
from mango.domain.values import (
    Command,
    ExecResult,
    SandboxSpec,
    validate_provider_name,
    validate_session_id,
)
from mango.temporal._waiting import Waiting, cancel_step, watch
from mango.temporal.codec import converter_for
from mango.temporal.failures import raise_as_mango_error
from mango.temporal.messages import (
    CleanupInput,
    ExecStep,
    HealthInput,
    ProviderHealth,
    SessionWorkflowInput,
    StepPolicy,
    ToolCall,
    ToolResult,
)
from mango.temporal.metrics import TemporalTelemetry
from mango.temporal.routing import (
    DEFAULT_TASK_QUEUE_PREFIX,
    EXEC_UPDATE,
    RUN_TOOL_UPDATE,
    cleanup_workflow_id,
    route_provider,
    session_workflow_id,
    task_queue_for,
)
from mango.temporal.workflows import ProviderHealthWorkflow, SandboxCleanupWorkflow, SessionWorkflow

__all__ = [
    "POLLER_FRESHNESS",
    "Orchestrator",
    "Waiting",
    "active_pollers",
    "connect",
    "require_worker",
    "worker_health",
]

POLLER_FRESHNESS = 90.0
"""Seconds since its last poll after which a poller no longer counts as a live worker.

A live worker long-polls about once a minute; the server keeps listing a
dead one for a while.
"""


@contextmanager
def _rpc_errors(doing: str) -> Iterator[None]:
    """Turn a refused or failed Temporal call into :class:`ProviderUnavailable`."""
    try:
        yield
    except RPCError as exc:
        raise ProviderUnavailable(f"Temporal could not {doing}: {exc.message}") from exc


_UNREACHABLE = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})
_REJOIN_INTERVALS = (0.25, 0.5, 1.0, 2.0)
"""Seconds between a client's health checks while its Temporal server is away (then the last)."""


def _server_went_away(error: ProviderUnavailable) -> bool:
    """True if ``error`` is a Temporal call that failed because the server could not be reached."""
    cause = error.__cause__
    return isinstance(cause, RPCError) and cause.status in _UNREACHABLE


async def _rejoin(client: Client, deadline: float) -> bool:
    """Wait until the Temporal server answers again, or ``deadline`` (loop time) passes."""
    loop = asyncio.get_running_loop()
    for attempt in itertools.count():
        try:
            if await client.service_client.check_health():
                return True
        except RPCError:
            pass
        pause = _REJOIN_INTERVALS[min(attempt, len(_REJOIN_INTERVALS) - 1)]
        if loop.time() + pause >= deadline:
            return False
        await asyncio.sleep(pause)
    return False  # pragma: no cover - itertools.count() never ends


_TASK_FAILED = "Workflow Task in failed state"
"""What the server says of an update whose workflow cannot run at all."""


async def _raise_if_keys_mismatch(
    client: Client, workflow_id: str, refused: ProviderUnavailable
) -> None:
    """Raise a :class:`ConfigurationError` if the worker failed to open the workflow's payloads.

    When the workflow's own task keeps failing, the server refuses the
    update (``refused``). The failure the worker recorded says why; a
    payload-key mismatch (the worker cannot decrypt what this client sent, or
    this client cannot decrypt the worker's answer) is named at once instead
    of as an unavailable Temporal.
    """
    cause = refused.__cause__
    if not isinstance(cause, RPCError) or _TASK_FAILED not in cause.message:
        return
    handle = client.get_workflow_handle(workflow_id)
    failure = None
    try:
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_task_failed_event_attributes"):
                failure = event.workflow_task_failed_event_attributes.failure
    except RPCError:
        return
    if failure is None:
        return
    try:
        decoded = await client.data_converter.decode_failure(failure)
    except ConfigurationError as exc:  # encrypted with a key this client does not have
        reason = str(exc)
    else:
        reason = str(decoded)
        if PAYLOAD_KEYS_ENV not in reason:
            return
    raise ConfigurationError(
        f"the worker cannot run this step: {PAYLOAD_KEYS_ENV} differs between this process "
        f"and the worker ({reason})",
        hint="give every mango process on this Temporal namespace (clients and workers) the "
        f"same {PAYLOAD_KEYS_ENV}",
    ) from refused


async def connect(
    address: str,
    namespace: str = "default",
    *,
    payload_keys: Sequence[PayloadKey] = (),
    telemetry: TemporalTelemetry | None = None,
) -> Client:
    """A client with mango's data converter; :class:`ProviderUnavailable` if unreachable.

    With ``payload_keys`` every payload and failure message is encrypted (see
    :mod:`mango.temporal.codec`). ``telemetry`` (the worker's metrics,
    :mod:`mango.temporal.metrics`) gives it a runtime that reports Temporal's
    metrics and a tracing interceptor.
    """
    extra: dict[str, Any] = {}
    if telemetry is not None:
        extra = {"runtime": telemetry.runtime, "interceptors": list(telemetry.interceptors)}
    try:
        return await Client.connect(
            address, namespace=namespace, data_converter=converter_for(payload_keys), **extra
        )
    except (RuntimeError, RPCError) as exc:
        raise ProviderUnavailable(
            f"cannot reach Temporal at {address} (namespace {namespace!r}): {exc}",
            hint="check MANGO_TEMPORAL_ADDRESS and MANGO_TEMPORAL_NAMESPACE, "
            "or unset them and run 'mango worker' for an embedded dev server",
        ) from exc


async def active_pollers(client: Client, task_queue: str) -> list[str]:
    """Identities of workers that polled ``task_queue`` for workflow tasks recently."""
    with _rpc_errors(f"describe task queue {task_queue!r}"):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    now = time.time()
    return [
        poller.identity
        for poller in response.pollers
        if now - poller.last_access_time.ToSeconds() <= POLLER_FRESHNESS
    ]


@attrs.define
class Orchestrator:
    """Starts work for Sessions on the right provider's workers and waits for it."""

    client: Client
    store: BindingStore
    default_provider: str = attrs.field(validator=lambda _i, _a, v: validate_provider_name(v))
    """Provider for a Session that has neither a binding nor an intent (``MANGO_SANDBOX``)."""
    task_queue_prefix: str = DEFAULT_TASK_QUEUE_PREFIX
    policy: StepPolicy = attrs.field(factory=StepPolicy)
    idle_timeout: float = 900.0
    steps_per_run: int = 500
    outputs_quiet_period: float | None = 10.0
    """Seconds a Session is quiet after a step before its workflow publishes its outputs
    (on a provider that publishes them); None: only on demand."""
    require_worker: bool = True
    """Fail fast with an explanation when no worker polls the target queue."""
    capabilities: Callable[[str], CapabilitySet] | None = None
    """A provider's *declared* capabilities by name (``ProviderRegistry.capabilities``): a
    step's spec is admitted for the Session's provider before anything is written. None:
    only the worker admits (it always does, before it provisions)."""

    async def route(self, session_id: str) -> tuple[str, str]:
        """``(provider, task queue)`` that handle ``session_id``."""
        provider = await route_provider(self.store, session_id, self.default_provider)
        return provider, task_queue_for(provider, self.task_queue_prefix)

    async def _check_worker(self, provider: str, task_queue: str, doing: str) -> None:
        if self.require_worker:
            await require_worker(self.client, provider, task_queue, doing)

    async def run_tool(
        self,
        session_id: str,
        call: ToolCall,
        spec: SandboxSpec | None = None,
        *,
        max_wait: float = 120.0,
    ) -> ToolResult:
        """Run one tool step through the Session's workflow and return its result.

        Creates the Session if needed (a fenced one raises
        :class:`SessionDeleting`), starts its workflow or joins the running
        one (update-with-start), and waits for the step. A failed step is
        raised as the mango error it carries. If the Temporal server goes
        away meanwhile, the client waits for it up to ``max_wait`` seconds
        (see :meth:`exec`).
        """
        validate_session_id(session_id)
        parse_arguments(call)
        starter = await self._starter(session_id, spec)
        result: ToolResult = await self._send_step(
            session_id,
            RUN_TOOL_UPDATE,
            call,
            ToolResult,
            starter,
            update_id=uuid.uuid4().hex,
            max_wait=max_wait,
            doing=f"run a tool step of session {session_id!r}",
        )
        return result

    async def _send_step(
        self,
        session_id: str,
        update_name: str,
        argument: Any,
        result_type: type[Any],
        starter: Callable[[], WithStartWorkflowOperation[Any, Any]],
        *,
        update_id: str,
        max_wait: float,
        doing: str,
    ) -> Any:
        """Send one step (an update-with-start) and return its result, across a server outage.

        When the server goes away the update may already have been accepted:
        the step then runs once the server is back. So the client waits for
        the server (at most ``max_wait`` seconds from the first failure) and
        sends the same update id again, which joins the accepted step (or
        returns its outcome) instead of starting another. A server still away
        then is :func:`_outcome_unknown`, never a failed step.
        """
        workflow_id = session_workflow_id(session_id)
        operation = starter()
        outage: float | None = None
        while True:
            try:
                try:
                    with _rpc_errors(doing):
                        # By name: the SDK's overloads mistype async update methods.
                        return await self.client.execute_update_with_start_workflow(
                            update_name,
                            argument,
                            start_workflow_operation=operation,
                            result_type=result_type,
                            id=update_id,
                        )
                except WorkflowUpdateFailedError as exc:
                    raise_as_mango_error(exc)
            except ProviderUnavailable as exc:
                if not _server_went_away(exc):
                    await _raise_if_keys_mismatch(self.client, workflow_id, exc)
                    raise
                _forget_start(operation)
                loop = asyncio.get_running_loop()
                outage = loop.time() if outage is None else outage
                if not await _rejoin(self.client, outage + max_wait):
                    raise _outcome_unknown(session_id, update_id, max_wait) from exc
                operation = starter()

    async def _prepare(
        self, session_id: str, spec: SandboxSpec | None
    ) -> WithStartWorkflowOperation[Any, Any]:
        """Route, check for a worker, then create the Session row; the start of its workflow."""
        return (await self._starter(session_id, spec))()

    async def _starter(
        self, session_id: str, spec: SandboxSpec | None
    ) -> Callable[[], WithStartWorkflowOperation[Any, Any]]:
        """Route, check for a worker, then create the Session row; a maker of its workflow's start.

        Admission and the worker check come first: a step that cannot run
        leaves no Session row behind. The SDK uses a start operation once, so
        a step sent again (after its server came back) needs a new one.
        """
        provider, task_queue = await self.route(session_id)
        if self.capabilities is not None and spec is not None:
            admit_environment(provider, self.capabilities(provider), spec)
        await self._check_worker(provider, task_queue, "run the step")
        record = await self.store.ensure_session(session_id)
        if record.deleting:
            raise SessionDeleting(
                f"session {session_id!r} is being deleted",
                hint="wait for the deletion to finish, then use a new session id",
            )
        workflow_input = SessionWorkflowInput(
            session_id=session_id,
            spec=spec or SandboxSpec(),
            policy=self.policy,
            idle_timeout=self.idle_timeout,
            steps_per_run=self.steps_per_run,
            outputs_quiet_period=self.outputs_quiet_period,
        )
        return lambda: WithStartWorkflowOperation(
            SessionWorkflow.run,
            workflow_input,
            id=session_workflow_id(session_id),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )

    async def exec(
        self,
        session_id: str,
        command: Command,
        spec: SandboxSpec | None = None,
        *,
        max_wait: float = 120.0,
        on_wait: Callable[[Waiting], None] | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> ExecResult:
        """Run ``command`` in the Session's sandbox through its workflow; the provider's result.

        The same result as calling the sandbox directly (output cap,
        truncation flags, exit status; stdin passed as bytes). While an
        activity of the step fails and is retried (the provider is
        unavailable), or no worker picks the step up (its worker just
        stopped), ``on_wait`` hears why within a few seconds; after
        ``max_wait`` seconds of that, the step is cancelled and
        :class:`ProviderUnavailable` raised. ``on_progress`` hears what a
        running activity reports (the packages it installs).
        The workflow itself keeps its retry policy for every other step.
        Cancelling this coroutine cancels the step too (its command is
        killed) before it re-raises, so no work outlives the caller.
        """
        validate_session_id(session_id)
        starter = await self._starter(session_id, spec)
        step = ExecStep(step_id=uuid.uuid4().hex, command=command)
        handle = self.client.get_workflow_handle(session_workflow_id(session_id))
        sent: list[WithStartWorkflowOperation[Any, Any]] = []

        def start() -> WithStartWorkflowOperation[Any, Any]:
            sent.append(starter())
            return sent[-1]

        async def run() -> ExecResult:
            result: ExecResult = await self._send_step(
                session_id,
                EXEC_UPDATE,
                step,
                ExecResult,
                start,
                update_id=step.step_id,
                max_wait=max_wait,
                doing=f"run a command in session {session_id!r}",
            )
            return result

        update = asyncio.ensure_future(run())
        try:
            reason = await watch(
                self.client, handle, update, max_wait, on_wait, on_progress=on_progress
            )
        except BaseException:
            await cancel_step(handle, step.step_id, update)
            raise
        if reason is None:
            return update.result()
        unclaimed = reason.startswith("no worker")
        await cancel_step(handle, step.step_id, update, grace=0.0 if unclaimed else 30.0)
        for operation in sent:
            _forget_start(operation)
        if unclaimed:
            provider, _ = await self.route(session_id)
            raise ProviderUnavailable(
                f"gave up after {max_wait:g} s in session {session_id!r}: {reason}",
                hint=f"{_start_worker_hint(provider)}; the step was cancelled",
            )
        raise ProviderUnavailable(
            f"gave up after {max_wait:g} s of failed attempts in session {session_id!r}: {reason}",
            hint="fix what the error names (the provider is unavailable to the worker), or "
            "wait longer with --max-wait / MANGO_TEMPORAL_MAX_WAIT; the step was cancelled",
        )

    async def delete_session(self, session_id: str) -> bool:
        """Fence, then run (or join) the cleanup workflow and wait; False if already gone."""
        validate_session_id(session_id)
        if await self.store.fence_session(session_id) is None:
            return False
        provider, task_queue = await self.route(session_id)
        await self._check_worker(
            provider, task_queue, "delete it (it stays fenced; a worker will finish it)"
        )
        try:
            with _rpc_errors(f"delete session {session_id!r}"):
                handle = await self.client.start_workflow(
                    SandboxCleanupWorkflow.run,
                    CleanupInput(session_id=session_id, policy=self.policy),
                    id=cleanup_workflow_id(session_id),
                    task_queue=task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                )
                result = await handle.result()
        except WorkflowFailureError as exc:
            raise_as_mango_error(exc)
        return result.deleted

    async def worker_health(
        self, provider: str | None = None, timeout: float = 20.0
    ) -> ProviderHealth:
        """Ask a worker of ``provider`` (default: the default provider) for its health."""
        return await worker_health(
            self.client, provider or self.default_provider, self.task_queue_prefix, timeout
        )


def _forget_start(start: WithStartWorkflowOperation[Any, Any]) -> None:
    """Read the start's outcome that the SDK keeps for a cancelled or failed update-with-start.

    Cancelled before the server answered (no worker took the step), or failed
    because the server went away, the SDK stores the cancellation or the
    error on the start operation, and asyncio would log it as never
    retrieved: read here, since nobody else will.
    """
    outcome = start._workflow_handle  # private: no public way to ask whether it is set
    if outcome.done() and not outcome.cancelled():
        outcome.exception()


def _outcome_unknown(session_id: str, step_id: str, max_wait: float) -> ProviderUnavailable:
    """The verdict on a step whose Temporal server went away and did not come back in time."""
    return ProviderUnavailable(
        f"Temporal became unreachable while session {session_id!r} ran a step (update "
        f"{step_id}) and did not answer again within {max_wait:g} s: the step was not "
        "cancelled, so whether it ran is unknown, and it may still run once the server is back",
        hint="check the Temporal server (a 'mango worker' restarts its embedded one); look at "
        "the step's effect before you run it again, or wait longer with --max-wait",
    )


def _start_worker_hint(provider: str) -> str:
    return f"start one: MANGO_SANDBOX={provider} mango worker"


async def require_worker(client: Client, provider: str, task_queue: str, doing: str) -> None:
    """Raise :class:`ProviderUnavailable` if no live worker polls ``task_queue``."""
    if not await active_pollers(client, task_queue):
        raise ProviderUnavailable(
            f"no worker for provider {provider!r} is polling task queue {task_queue!r}, "
            f"so nothing would {doing}",
            hint=_start_worker_hint(provider),
        )


async def worker_health(
    client: Client,
    provider: str,
    task_queue_prefix: str = DEFAULT_TASK_QUEUE_PREFIX,
    timeout: float = 20.0,
) -> ProviderHealth:
    """Run the health workflow on ``provider``'s queue and return the worker's report.

    Fails fast with :class:`ProviderUnavailable` when no worker polls that queue.
    """
    task_queue = task_queue_for(provider, task_queue_prefix)
    await require_worker(client, provider, task_queue, "answer")
    try:
        with _rpc_errors(f"ask the workers of {task_queue!r} for their health"):
            return await client.execute_workflow(
                ProviderHealthWorkflow.run,
                HealthInput(),
                id=f"mango-health:{task_queue}:{uuid.uuid4().hex}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=timeout),
            )
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, TimeoutError_):
            raise ProviderUnavailable(
                f"no worker of provider {provider!r} answered on {task_queue!r} "
                f"within {timeout:g} s",
                hint=_start_worker_hint(provider),
            ) from exc
        raise_as_mango_error(exc)
