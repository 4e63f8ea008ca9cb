"""Temporal activities: the only place on the Temporal side that calls adapters.

:class:`MangoActivities` is constructed with its ports (a SessionManager for
one provider, the BindingStore, optionally a Temporal client and the
provider's registration) and registered on one worker. Each activity takes one
attrs request and returns one attrs output (:mod:`mango.temporal.messages`),
validates it at this boundary, and translates mango errors once, on the way
out (:mod:`mango.temporal.failures`): permanent errors and lost sandboxes are
non-retryable, everything else retries.

A worker that dies mid-step has the step run again on another worker once
its heartbeat times out. Where the sandbox is a
:class:`~mango.domain.ports.StepSandbox` (local, Docker, E2B, Cube:
:mod:`mango.provider.steps`), each command of the step runs once: the
retry finds the command the dead worker started, waits for it and collects
its result, keyed by the step's place in the workflow (:mod:`mango.temporal._once`).
Elsewhere the command runs again (at least once). File writes are replayed
as they are (a write is idempotent; ``edit`` then sees the first attempt's
effects and may fail accordingly).

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
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from temporalio import activity
from temporalio.client import Client

from mango.app.session_manager import ReconcileReport, SessionManager
from mango.app.tools import ToolRunner, parse_arguments
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
from mango.temporal._attempts import activity_deadline, boundary, heartbeating
from mango.temporal._once import once
from mango.temporal._payload_limit import (
    DEFAULT_BLOB_LIMIT,
    PAYLOAD_MARGIN,
    blob_size_limit,
    fit_payload,
    payload_size,
    read_budget,
)
from mango.temporal._workflow_control import cancel_session_workflow, start_cleanups
from mango.temporal.messages import (
    AcquireInput,
    AcquireOutput,
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
from mango.temporal.resource_activities import ResourceActivities
from mango.temporal.routing import (
    DEFAULT_TASK_QUEUE_PREFIX,
    task_queue_for,
)

__all__ = ["DEFAULT_BLOB_LIMIT", "MangoActivities"]

_LOG = logging.getLogger(__name__)


@attrs.define
class MangoActivities(ResourceActivities):
    """The activities of one worker, bound to its provider through ``manager``.

    The resource activities (materialize, publish outputs, reconcile files)
    come from :class:`~mango.temporal.resource_activities.ResourceActivities`.
    """

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
            self.materialize_resources,
            self.publish_outputs,
            self.reconcile_files,
        ]

    # ------------------------------------------------------------ helpers

    async def _sandbox(self, session_id: str, spec: SandboxSpec) -> Sandbox:
        # SessionManager reads the Session row on every acquire: an absent
        # Session is InvalidInput and a fenced one SessionDeleting.
        try:
            return await self.manager.acquire(session_id, spec, deadline=activity_deadline())
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
            return AcquireOutput(
                ref=sandbox.ref, materializes=self.materializes, publishes=self.publishes
            )

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="ExecuteTool")
    async def execute_tool(self, request: ToolStepInput) -> ToolResult:
        """Run one built-in tool call in the Session's sandbox, heartbeating meanwhile.

        The call is validated before anything is provisioned. Cancelling the
        activity cancels the command in the sandbox.
        """

        async def work() -> ToolResult:
            parse_arguments(request.call)
            sandbox = await self._sandbox(request.session_id, request.spec)
            async with self.manager.tool_step(
                request.session_id, request.spec, deadline=activity_deadline()
            ) as step:
                result = await self.tools.run(once(sandbox, request.spec.timeout), request.call)
            if step.failure is None:
                return result
            return attrs.evolve(
                result,
                output=f"{result.output}\n{step.failure}",
                memory_writeback_error=step.failure,
            )

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="ExecCommand")
    async def exec_command(self, request: ExecStepInput) -> ExecResult:
        """Run one command in the Session's sandbox, as ``mango exec`` does directly.

        The result is the provider's own: the same per-stream output cap and
        truncation flags as the direct path, stdin passed byte for byte.
        Cancelling the activity cancels the command (its process tree).
        """

        async def work() -> ExecResult:
            sandbox = await self._sandbox(request.session_id, request.spec)
            async with self.manager.tool_step(
                request.session_id, request.spec, deadline=activity_deadline()
            ) as step:
                result = await once(sandbox, request.spec.timeout).exec(request.command)
            if step.failure is not None:
                result = attrs.evolve(result, memory_writeback_error=step.failure)
            return await self._fit(result)

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    async def _fit(self, result: ExecResult) -> ExecResult:
        """``result``, cut to fit the namespace's payload limit (:func:`fit_payload`)."""
        return await fit_payload(result, await self._payload_budget(), self._payload_size)

    async def _payload_budget(self) -> int:
        """The namespace's blob size limit (asked once), less room for the envelope."""
        if self._blob_limit is None:
            self._blob_limit = await blob_size_limit(self.client)
        return self._blob_limit - PAYLOAD_MARGIN

    async def _payload_size(self, result: ExecResult | ReadFileOutput) -> int:
        return await payload_size(self.client, result)

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

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    async def _read_budget(self) -> int:
        """The most file bytes a :class:`ReadFileOutput` can carry within the payload budget."""
        return await read_budget(await self._payload_budget(), self._payload_size)

    @activity.defn(name="WriteFile")
    async def write_file(self, request: WriteFileInput) -> WriteFileOutput:
        """Create or replace one workspace file."""

        async def work() -> WriteFileOutput:
            sandbox = await self._sandbox(request.session_id, request.spec)
            await sandbox.write_file(request.path, request.data)
            return WriteFileOutput(size=len(request.data))

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    # ------------------------------------------------------------ deletion

    @activity.defn(name="ReleaseSandbox")
    async def release_sandbox(self, request: ReleaseInput) -> ReleaseOutput:
        """Fence the Session, destroy its sandbox, remove its binding and intent.

        Idempotent. Another provider's binding or intent is a non-retryable
        :class:`OwnershipError` naming the worker that must run.
        """

        async def work() -> ReleaseOutput:
            await self.manager.release(request.session_id, deadline=activity_deadline())
            return ReleaseOutput(session_id=request.session_id)

        return await boundary(heartbeating(work(), self.heartbeat_interval))

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
        work = cancel_session_workflow(client, request.session_id, request.grace)
        return await boundary(heartbeating(work, self.heartbeat_interval))

    @activity.defn(name="DeleteSessionRecord")
    async def delete_session_record(
        self, request: DeleteSessionRecordInput
    ) -> DeleteSessionRecordOutput:
        """Delete the fenced Session row; retried while a binding or intent remains."""
        validate_session_id(request.session_id)
        return await boundary(self._delete_record(request.session_id))

    async def _delete_record(self, session_id: str) -> DeleteSessionRecordOutput:
        # Through the table: the Session's resource rows and output files go first.
        deleted = await self.manager.finish_deletion(session_id, deadline=activity_deadline())
        return DeleteSessionRecordOutput(deleted=deleted)

    # ------------------------------------------------------------ reconciliation

    @activity.defn(name="ReconcileProvisioning")
    async def reconcile_provisioning(self, request: ReconcileInput) -> ReconcileReport:
        """Finish or destroy what a crash left between intent and binding (this provider only)."""
        return await boundary(
            heartbeating(
                self.manager.reconcile_provisioning(request.limit, deadline=activity_deadline()),
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

        async def work() -> ReconcileReport:
            client = self._require_client()
            return await start_cleanups(client, self.store, self.provider, self.task_queue, request)

        return await boundary(heartbeating(work(), self.heartbeat_interval))

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
