"""Temporal activities: the only place on the Temporal side that calls adapters.

:class:`MangoActivities` is constructed with its ports (a SessionManager for
one provider, the BindingStore, optionally a Temporal client and the
provider's registration) and registered on one worker. Each activity takes one
attrs request and returns one attrs output (:mod:`mango.temporal.messages`),
validates it at this boundary, and translates mango errors once, on the way
out (:mod:`mango.temporal.failures`): permanent errors and lost sandboxes are
non-retryable, everything else retries.

A tool step runs at least once: if a worker dies mid-step, Temporal runs
the step again on another worker once its heartbeat times out (tools like
``edit`` then see the first attempt's effects and may fail accordingly).

Long activities heartbeat every ``heartbeat_interval`` seconds while they
work. When the workflow cancels one, Temporal delivers the cancellation
through the heartbeat and the activity's asyncio task is cancelled; the
command running in the sandbox is cancelled with it (the Sandbox contract
kills its process tree) before the activity reports back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
from temporalio import activity
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from mango.app.session_manager import ReconcileReport, SessionManager
from mango.app.tools import ToolRunner, parse_arguments
from mango.domain.deadline import deadline_in
from mango.domain.errors import (
    ConfigurationError,
    FileTooLarge,
    InvalidInput,
    MangoError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.domain.ports import BindingStore, Sandbox
from mango.domain.registry import ProviderRegistration
from mango.domain.values import ExecResult, SandboxSpec, validate_session_id
from mango.temporal.failures import to_application_error
from mango.temporal.messages import (
    AcquireInput,
    AcquireOutput,
    CleanupInput,
    CredentialStatus,
    DeleteSessionRecordInput,
    DeleteSessionRecordOutput,
    ExecStepInput,
    FinishDeletionsInput,
    HealthInput,
    ProviderHealth,
    ReadFileInput,
    ReadFileOutput,
    ReconcileInput,
    ReleaseInput,
    ReleaseOutput,
    StopSessionWorkflowInput,
    StopSessionWorkflowOutput,
    ToolResult,
    ToolStepInput,
    WriteFileInput,
    WriteFileOutput,
)
from mango.temporal.payloads import data_converter
from mango.temporal.routing import (
    CLEANUP_WORKFLOW,
    DEFAULT_TASK_QUEUE_PREFIX,
    cleanup_workflow_id,
    route_provider,
    session_workflow_id,
    task_queue_for,
)

__all__ = ["DEFAULT_BLOB_LIMIT", "MangoActivities"]

DEFAULT_BLOB_LIMIT = 2 * 1024 * 1024
"""Temporal's default blob size limit, assumed when the server does not report its own."""
_PAYLOAD_MARGIN = 64 * 1024

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")


async def _boundary(work: Awaitable[_T]) -> _T:
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


def _activity_deadline() -> float | None:
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


async def _heartbeating(work: Coroutine[Any, Any, _T], interval: float) -> _T:
    """Run ``work`` while heartbeating; if we are cancelled, cancel it and wait for it.

    A local activity does not heartbeat (it has no heartbeat timeout: the
    workflow task it runs in is what times out if the worker dies).
    """
    task = asyncio.ensure_future(work)
    beat = not activity.info().is_local
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if beat:
                activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
            # The command must be gone before the activity reports its cancellation.
            await asyncio.wait({task})


@attrs.define
class MangoActivities:
    """The activities of one worker, bound to its provider through ``manager``."""

    manager: SessionManager
    store: BindingStore
    client: Client | None = None
    """Needed by the activities that start or stop workflows (cleanup, reconciler)."""
    registration: ProviderRegistration | None = None
    """For health reports: support level and which settings are secrets."""
    task_queue_prefix: str = DEFAULT_TASK_QUEUE_PREFIX
    tools: ToolRunner = attrs.field(factory=ToolRunner)
    """The built-in tools (the worker bounds ``read`` and ``edit`` by ``MANGO_MAX_READ_BYTES``)."""
    heartbeat_interval: float = 1.0
    environ: Mapping[str, str] = attrs.field(factory=lambda: os.environ, repr=False)
    _blob_limit: int | None = attrs.field(default=None, init=False, repr=False)

    @property
    def provider(self) -> str:
        """This worker's provider name."""
        return self.manager.provider.name

    @property
    def task_queue(self) -> str:
        """This worker's task queue."""
        return task_queue_for(self.provider, self.task_queue_prefix)

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``Worker(activities=...)``."""
        return [
            self.acquire_sandbox,
            self.execute_tool,
            self.exec_command,
            self.read_file,
            self.write_file,
            self.release_sandbox,
            self.stop_session_workflow,
            self.delete_session_record,
            self.reconcile_provisioning,
            self.finish_deletions,
            self.provider_health,
        ]

    # ------------------------------------------------------------ helpers

    async def _sandbox(self, session_id: str, spec: SandboxSpec) -> Sandbox:
        # SessionManager reads the Session row on every acquire: an absent
        # Session is InvalidInput and a fenced one SessionDeleting.
        try:
            return await self.manager.acquire(session_id, spec, deadline=_activity_deadline())
        except SandboxNotFound as exc:
            _LOG.error("session %s: %s", session_id, exc)
            raise

    def _require_client(self) -> Client:
        if self.client is None:
            raise ConfigurationError("this activity needs a Temporal client; none was given")
        return self.client

    # ------------------------------------------------------------ session work

    @activity.defn(name="AcquireSandbox")
    async def acquire_sandbox(self, request: AcquireInput) -> AcquireOutput:
        """Provision the Session's sandbox on first use, or attach to it.

        A lost sandbox (:class:`SandboxNotFound`) fails non-retryably: the
        workspace is gone and is never silently replaced by an empty one.
        """

        async def work() -> AcquireOutput:
            sandbox = await self._sandbox(request.session_id, request.spec)
            return AcquireOutput(ref=sandbox.ref)

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="ExecuteTool")
    async def execute_tool(self, request: ToolStepInput) -> ToolResult:
        """Run one built-in tool call in the Session's sandbox, heartbeating meanwhile.

        The call is validated before anything is provisioned. Cancelling the
        activity cancels the command in the sandbox.
        """

        async def work() -> ToolResult:
            parse_arguments(request.call)
            sandbox = await self._sandbox(request.session_id, request.spec)
            return await self.tools.run(sandbox, request.call)

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="ExecCommand")
    async def exec_command(self, request: ExecStepInput) -> ExecResult:
        """Run one command in the Session's sandbox, as ``mango exec`` does directly.

        The result is the provider's own: the same per-stream output cap and
        truncation flags as the direct path, stdin passed byte for byte.
        Cancelling the activity cancels the command (its process tree).
        """

        async def work() -> ExecResult:
            sandbox = await self._sandbox(request.session_id, request.spec)
            return await self._fit(await sandbox.exec(request.command))

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    async def _fit(self, result: ExecResult) -> ExecResult:
        """``result``, cut further if its payload would exceed the namespace's size limit.

        The server (and the SDK before it) refuses a payload over the
        namespace's blob size limit (2 MiB by default): the step would fail
        after the command ran, and every retry would run it again. Both
        streams at a large cap can exceed it, so the longer stream keeps a
        shorter prefix (its truncation flag set) until the result fits.
        """
        budget = await self._payload_budget()
        for _ in range(8):
            size = await self._payload_size(result)
            if size <= budget:
                return result
            over = size - budget
            # base85 in JSON: 5 characters per 4 bytes, plus slack for the rest.
            cut = over * 4 // 5 + 1024
            if len(result.stdout) >= len(result.stderr):
                keep = max(len(result.stdout) - cut, 0)
                result = attrs.evolve(result, stdout=result.stdout[:keep], stdout_truncated=True)
            else:
                keep = max(len(result.stderr) - cut, 0)
                result = attrs.evolve(result, stderr=result.stderr[:keep], stderr_truncated=True)
            _LOG.warning(
                "exec output cut to %d + %d bytes to fit Temporal's payload limit (%d bytes)",
                len(result.stdout),
                len(result.stderr),
                budget,
            )
        return result

    async def _payload_budget(self) -> int:
        """The namespace's blob size limit (asked once), less room for the envelope."""
        if self._blob_limit is None:
            limit = 0
            if self.client is not None:
                try:
                    response = await self.client.workflow_service.describe_namespace(
                        DescribeNamespaceRequest(namespace=self.client.namespace)
                    )
                    limit = response.namespace_info.limits.blob_size_limit_error
                except RPCError as exc:
                    _LOG.warning("could not read the namespace's payload limit: %s", exc)
            self._blob_limit = limit if limit > 0 else DEFAULT_BLOB_LIMIT
        return self._blob_limit - _PAYLOAD_MARGIN

    async def _payload_size(self, result: ExecResult | ReadFileOutput) -> int:
        converter = self.client.data_converter if self.client is not None else data_converter
        return sum(payload.ByteSize() for payload in await converter.encode([result]))

    @activity.defn(name="ReadFile")
    async def read_file(self, request: ReadFileInput) -> ReadFileOutput:
        """Return the bytes of one workspace file; a missing file is :class:`InvalidInput`.

        Bounded at the source by the smaller of ``request.max_bytes`` (else
        the worker's read bound, ``MANGO_MAX_READ_BYTES``) and what fits the
        namespace's payload limit: a larger result would be refused after the
        read, on every retry. A file over the bound is :class:`FileTooLarge`
        (final), whose message names the bound that applied.
        """

        async def work() -> ReadFileOutput:
            sandbox = await self._sandbox(request.session_id, request.spec)
            requested = (
                self.tools.max_read_bytes if request.max_bytes is None else request.max_bytes
            )
            fits = await self._read_budget()
            try:
                data = await sandbox.read_file(request.path, max_bytes=min(requested, fits))
            except FileNotFoundError:
                raise InvalidInput(f"no file {request.path!r} in the workspace") from None
            except FileTooLarge as exc:
                if fits >= requested:
                    raise
                raise FileTooLarge(
                    f"file {request.path!r} is larger than a ReadFile result can carry "
                    f"({exc.size} > {fits} bytes, set by Temporal's payload limit)",
                    size=exc.size,
                    limit=fits,
                    hint="stream it outside the workflow (Sandbox.open_file, 'mango files "
                    "read'), or read it in parts with ExecCommand",
                ) from None
            return ReadFileOutput(data=data)

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    async def _read_budget(self) -> int:
        """The most file bytes a :class:`ReadFileOutput` can carry within the payload budget."""
        budget = await self._payload_budget()
        # Measured, not assumed: the converter's (and codec's) overhead for one byte and for
        # one kilobyte of data gives the cost per byte and the fixed part.
        one = await self._payload_size(ReadFileOutput(data=b"\xff"))
        kilo = await self._payload_size(ReadFileOutput(data=b"\xff" * 1025))
        per_kilo = kilo - one
        return max((budget - one) * 1024 // per_kilo, 0)

    @activity.defn(name="WriteFile")
    async def write_file(self, request: WriteFileInput) -> WriteFileOutput:
        """Create or replace one workspace file."""

        async def work() -> WriteFileOutput:
            sandbox = await self._sandbox(request.session_id, request.spec)
            await sandbox.write_file(request.path, request.data)
            return WriteFileOutput(size=len(request.data))

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    # ------------------------------------------------------------ deletion

    @activity.defn(name="ReleaseSandbox")
    async def release_sandbox(self, request: ReleaseInput) -> ReleaseOutput:
        """Fence the Session, destroy its sandbox, remove its binding and intent.

        Idempotent. Another provider's binding or intent is a non-retryable
        :class:`OwnershipError` naming the worker that must run.
        """

        async def work() -> ReleaseOutput:
            await self.manager.release(request.session_id, deadline=_activity_deadline())
            return ReleaseOutput(session_id=request.session_id)

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="StopSessionWorkflow")
    async def stop_session_workflow(
        self, request: StopSessionWorkflowInput
    ) -> StopSessionWorkflowOutput:
        """Cancel the Session's tool workflow and wait until it closed.

        Cancelling it cancels a running tool step and the command inside the
        sandbox. A workflow still open after ``grace`` seconds is terminated.
        A workflow that does not exist counts as stopped.
        """
        client = self._require_client()
        handle = client.get_workflow_handle(session_workflow_id(request.session_id))

        async def status() -> WorkflowExecutionStatus | None:
            try:
                return (await handle.describe()).status
            except RPCError as exc:
                if exc.status is RPCStatusCode.NOT_FOUND:
                    return None
                raise ProviderUnavailable(f"Temporal: {exc.message}") from exc

        async def work() -> StopSessionWorkflowOutput:
            if await status() is not WorkflowExecutionStatus.RUNNING:
                return StopSessionWorkflowOutput(was_running=False)
            await handle.cancel()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + request.grace
            while loop.time() < deadline:
                if await status() is not WorkflowExecutionStatus.RUNNING:
                    return StopSessionWorkflowOutput(was_running=True)
                await asyncio.sleep(0.2)
            _LOG.warning(
                "session workflow of %s ignored cancellation; terminating", request.session_id
            )
            try:
                await handle.terminate(reason="session deleted; cancellation timed out")
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise ProviderUnavailable(f"Temporal: {exc.message}") from exc
            return StopSessionWorkflowOutput(was_running=True, terminated=True)

        return await _boundary(_heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="DeleteSessionRecord")
    async def delete_session_record(
        self, request: DeleteSessionRecordInput
    ) -> DeleteSessionRecordOutput:
        """Delete the fenced Session row; retried while a binding or intent remains."""
        validate_session_id(request.session_id)
        return await _boundary(self._delete_record(request.session_id))

    async def _delete_record(self, session_id: str) -> DeleteSessionRecordOutput:
        return DeleteSessionRecordOutput(deleted=await self.store.delete_session(session_id))

    # ------------------------------------------------------------ reconciliation

    @activity.defn(name="ReconcileProvisioning")
    async def reconcile_provisioning(self, request: ReconcileInput) -> ReconcileReport:
        """Finish or destroy what a crash left between intent and binding (this provider only)."""
        return await _boundary(
            _heartbeating(
                self.manager.reconcile_provisioning(request.limit, deadline=_activity_deadline()),
                self.heartbeat_interval,
            )
        )

    @activity.defn(name="FinishDeletions")
    async def finish_deletions(self, request: FinishDeletionsInput) -> ReconcileReport:
        """Start or join the cleanup workflow of each fenced Session routed to this provider.

        A Session bound to (or being provisioned by) another provider is left
        to that provider's workers. A cleanup run that failed is started again
        only ``retry_failed_after`` seconds after it closed, so a permanent
        failure is reported rather than hammered. Each Session is isolated.
        """
        return await _boundary(
            _heartbeating(self._finish_deletions(request), self.heartbeat_interval)
        )

    async def _finish_deletions(self, request: FinishDeletionsInput) -> ReconcileReport:
        client = self._require_client()
        records = await self.store.list_deleting_sessions(request.limit)
        attempted = started = 0
        failures: list[tuple[str, str]] = []
        for record in records:
            session_id = record.session_id
            try:
                if await route_provider(self.store, session_id, self.provider) != self.provider:
                    continue
                attempted += 1
                workflow_id = cleanup_workflow_id(session_id)
                recent = await self._recent_failure(client, workflow_id, request.retry_failed_after)
                if recent is not None:
                    failures.append((session_id, recent))
                    continue
                await client.start_workflow(
                    CLEANUP_WORKFLOW,
                    CleanupInput(session_id=session_id, policy=request.policy),
                    id=workflow_id,
                    task_queue=self.task_queue,
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

    @staticmethod
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

    # ------------------------------------------------------------ health

    @activity.defn(name="ProviderHealth")
    async def provider_health(self, request: HealthInput) -> ProviderHealth:
        """Report this worker's provider: reachability and which credentials are present.

        Reachability is the provider's own real round trip
        (:meth:`~mango.domain.ports.Provider.health`); one that raises
        :class:`ProviderUnavailable` is unreachable. Secret values are never
        read into the report, only whether they are set.
        """
        _ = request
        reachable, detail = await self._probe()
        credentials: tuple[CredentialStatus, ...] = ()
        missing: tuple[str, ...] = ()
        level = ""
        if self.registration is not None:
            level = self.registration.support_level.value
            credentials = tuple(
                CredentialStatus(s.env, bool(self.environ.get(s.env)), s.required)
                for s in self.registration.settings
                if s.secret
            )
            missing = tuple(
                s.env
                for s in self.registration.settings
                if s.required and not self.environ.get(s.env)
            )
        return ProviderHealth(
            provider=self.provider,
            task_queue=self.task_queue,
            reachable=reachable,
            detail=detail,
            support_level=level,
            credentials=credentials,
            missing_settings=missing,
            worker=f"{socket.gethostname()}:{os.getpid()}",
        )

    async def _probe(self) -> tuple[bool, str]:
        try:
            async with asyncio.timeout(10.0):
                return True, await self.manager.provider.health()
        except ProviderUnavailable as exc:
            return False, f"unreachable: {exc}"
        except TimeoutError:
            return False, "unreachable: no answer within 10 s"
        except MangoError as exc:
            return False, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a health probe reports, it never raises
            return False, f"unexpected {type(exc).__name__}: {exc}"
