"""One attrs input and one attrs output per workflow and activity.

They travel as JSON through the one edge converter (:mod:`mango.app.converter`,
wrapped by :mod:`mango.temporal.payloads`): adding a field with a default
keeps old histories replayable, and a field a message does not have is
refused (:class:`~mango.domain.errors.InvalidInput`), never dropped, so a
worker older than the client that wrote a new field says so instead of
ignoring it. Session ids are validated on construction, so a malformed
request fails where it is made.
"""

from __future__ import annotations

from typing import Any

import attrs

from mango.app.converter import converter
from mango.app.session_manager import ReconcileReport
from mango.app.tools import ToolCall, ToolResult
from mango.domain.errors import InvalidInput
from mango.domain.values import (
    Command,
    ExecResult,
    PackagePlan,
    SandboxRef,
    SandboxSpec,
    validate_session_id,
)
from mango.temporal.resource_messages import ReconcileFilesOutput

__all__ = [
    "AcquireInput",
    "AcquireOutput",
    "CleanupInput",
    "CleanupOutput",
    "CredentialStatus",
    "DeleteSessionRecordInput",
    "DeleteSessionRecordOutput",
    "ExecStep",
    "ExecStepInput",
    "FinishDeletionsInput",
    "HealthInput",
    "ProviderHealth",
    "ReadFileInput",
    "ReadFileOutput",
    "ReconcileInput",
    "ReconcileReport",
    "ReconcilerInput",
    "ReconcilerStatus",
    "ReleaseInput",
    "ReleaseOutput",
    "SessionWorkflowInput",
    "SessionWorkflowOutput",
    "StepPolicy",
    "StopSessionWorkflowInput",
    "StopSessionWorkflowOutput",
    "ToolCall",
    "ToolResult",
    "ToolStepInput",
    "WriteFileInput",
    "WriteFileOutput",
]


def _session_id(_instance: object, _attribute: object, value: Any) -> None:
    validate_session_id(value)


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidInput(f"{attribute.name} must be a positive number, got {value!r}")


def _non_negative(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidInput(f"{attribute.name} must not be negative, got {value!r}")


# ---------------------------------------------------------------- policies


@attrs.frozen
class StepPolicy:
    """Timeouts and retries of the activities a workflow schedules (seconds).

    Retries back off from ``initial_retry`` doubling to ``max_retry_interval``
    and never give up (``maximum_attempts`` 0), except on non-retryable
    failures. ``heartbeat_timeout`` bounds how long a dead worker holds a step
    and how quickly a cancellation reaches it.
    """

    start_to_close: float = attrs.field(default=1800.0, validator=_positive)
    heartbeat_timeout: float = attrs.field(default=10.0, validator=_positive)
    initial_retry: float = attrs.field(default=1.0, validator=_positive)
    max_retry_interval: float = attrs.field(default=60.0, validator=_positive)
    maximum_attempts: int = attrs.field(default=0, validator=_non_negative)
    stop_grace: float = attrs.field(default=30.0, validator=_positive)
    """How long cleanup waits for a cancelled Session workflow before terminating it."""
    local_exec_limit: float = attrs.field(default=10.0, validator=_non_negative)
    """Exec steps whose command has a timeout of at most this many seconds run as local
    activities (in the worker that runs the workflow task: two fewer server round
    trips, about 10 ms); unbounded or longer ones, and every step when 0, run as
    normal activities, whose heartbeats let the server notice a dead worker. Either
    way a worker that dies mid-step has the step retried elsewhere, which runs each
    command once where the sandbox keeps step records (local, Docker, E2B, Cube) and again
    elsewhere (``steps-at-least-once``)."""


# ---------------------------------------------------------------- activities


@attrs.frozen
class AcquireInput:
    """Provision or attach the Session's sandbox."""

    session_id: str = attrs.field(validator=_session_id)
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


@attrs.frozen
class AcquireOutput:
    """The sandbox the Session is bound to, and which resource steps its worker runs."""

    ref: SandboxRef
    materializes: bool = False
    """The provider takes File Resources: materialize before each step."""
    publishes: bool = False
    """The provider publishes outputs: publish once the Session has been quiet."""


@attrs.frozen
class ToolStepInput:
    """Run one built-in tool call in the Session's sandbox."""

    session_id: str = attrs.field(validator=_session_id)
    call: ToolCall
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


@attrs.frozen
class ExecStep:
    """One command for the Session's sandbox (the ``Exec`` update): ``mango exec``'s durable twin.

    ``step_id`` is chosen by the client and names the step for ``CancelStep``.
    """

    step_id: str = attrs.field(validator=attrs.validators.min_len(1))
    command: Command


@attrs.frozen
class ExecStepInput:
    """Run one command in the Session's sandbox; the result is the provider's ``ExecResult``."""

    session_id: str = attrs.field(validator=_session_id)
    command: Command
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


def _optional_seconds(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _positive(_instance, attribute, value)


def _optional_positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{attribute.name} must be a positive integer or None, got {value!r}")


@attrs.frozen
class ReadFileInput:
    """Read one workspace file of at most ``max_bytes`` (None: the worker's read bound).

    The worker lowers the bound further to what fits Temporal's payload limit.
    """

    session_id: str = attrs.field(validator=_session_id)
    path: str
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)
    max_bytes: int | None = attrs.field(default=None, validator=_optional_positive)


@attrs.frozen
class ReadFileOutput:
    """The file's bytes."""

    data: bytes


@attrs.frozen
class WriteFileInput:
    """Create or replace one workspace file."""

    session_id: str = attrs.field(validator=_session_id)
    path: str
    data: bytes
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


@attrs.frozen
class WriteFileOutput:
    """How many bytes were written."""

    size: int


@attrs.frozen
class ReleaseInput:
    """Fence the Session and tear its sandbox down."""

    session_id: str = attrs.field(validator=_session_id)


@attrs.frozen
class ReleaseOutput:
    """Release finished: no binding and no intent are left."""

    session_id: str


@attrs.frozen
class StopSessionWorkflowInput:
    """Cancel the Session's tool workflow and wait for it to close."""

    session_id: str = attrs.field(validator=_session_id)
    grace: float = attrs.field(default=30.0, validator=_positive)
    """Seconds to wait after cancelling before terminating."""


@attrs.frozen
class StopSessionWorkflowOutput:
    """Whether a running workflow was stopped, and how."""

    was_running: bool
    terminated: bool = False


@attrs.frozen
class DeleteSessionRecordInput:
    """Delete the fenced Session row once nothing refers to a sandbox."""

    session_id: str = attrs.field(validator=_session_id)


@attrs.frozen
class DeleteSessionRecordOutput:
    """False if the row was already gone."""

    deleted: bool


@attrs.frozen
class ReconcileInput:
    """One provisioning-reconciliation batch."""

    limit: int = attrs.field(default=100, validator=_positive)


@attrs.frozen
class FinishDeletionsInput:
    """Start (or join) the cleanup of fenced Sessions routed to this worker's provider."""

    limit: int = attrs.field(default=100, validator=_positive)
    retry_failed_after: float = attrs.field(default=300.0, validator=_non_negative)
    """Seconds before a failed cleanup run is started again."""
    policy: StepPolicy = attrs.field(factory=StepPolicy)


@attrs.frozen
class HealthInput:
    """Ask a worker about its provider."""


@attrs.frozen
class CredentialStatus:
    """Whether one secret setting is present. Its value is never reported."""

    env: str
    present: bool
    required: bool = False


@attrs.frozen
class ProviderHealth:
    """A worker's view of its provider."""

    provider: str
    task_queue: str
    reachable: bool
    detail: str
    support_level: str = ""
    credentials: tuple[CredentialStatus, ...] = ()
    missing_settings: tuple[str, ...] = ()
    worker: str = ""
    """The answering worker's identity (host and pid)."""

    @property
    def ok(self) -> bool:
        """Reachable, and no required setting missing."""
        return self.reachable and not self.missing_settings


# ---------------------------------------------------------------- workflows


@attrs.frozen
class SessionWorkflowInput:
    """Start of a Session's tool workflow; carried over by continue-as-new."""

    session_id: str = attrs.field(validator=_session_id)
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)
    policy: StepPolicy = attrs.field(factory=StepPolicy)
    idle_timeout: float = attrs.field(default=900.0, validator=_positive)
    """Seconds without a tool step after which the run completes (a new one starts on demand)."""
    steps_per_run: int = attrs.field(default=500, validator=_positive)
    """Tool steps after which the run continues as new, keeping histories short."""
    outputs_quiet_period: float | None = attrs.field(default=10.0, validator=_optional_seconds)
    """Seconds without a step after which the Session's outputs are published (on a
    provider that publishes them); None: never on its own."""


@attrs.frozen
class SessionWorkflowOutput:
    """How many tool steps one run served."""

    steps: int


@attrs.frozen
class CleanupInput:
    """Delete one Session: stop its workflow, release its sandbox, delete its row."""

    session_id: str = attrs.field(validator=_session_id)
    policy: StepPolicy = attrs.field(factory=StepPolicy)


@attrs.frozen
class CleanupOutput:
    """False if the Session row was already gone."""

    session_id: str
    deleted: bool


@attrs.frozen
class ReconcilerInput:
    """Configuration of one provider's reconciler loop."""

    interval: float = attrs.field(default=5.0, validator=_positive)
    """Seconds between passes (a pass that completed work is followed by a quick one)."""
    batch: int = attrs.field(default=100, validator=_positive)
    attempt_timeout: float = attrs.field(default=30.0, validator=_positive)
    passes_per_run: int = attrs.field(default=100, validator=_positive)
    """Passes after which the loop continues as new, keeping its history short."""
    retry_failed_after: float = attrs.field(default=300.0, validator=_non_negative)
    policy: StepPolicy = attrs.field(factory=StepPolicy)
    file_stale_after: float = attrs.field(default=3600.0, validator=_non_negative)
    """Seconds a stored file's upload may go unheard of before the pass gives it up."""


@attrs.frozen
class ReconcilerStatus:
    """The last pass of a reconciler, for operators (a query)."""

    passes: int = 0
    provisioning: ReconcileReport | None = None
    deletions: ReconcileReport | None = None
    errors: tuple[str, ...] = ()
    files: ReconcileFilesOutput | None = None


def warm_up() -> None:
    """Resolve type hints and build the cattrs hooks now, outside the workflow sandbox.

    Inside the sandbox ``typing.get_type_hints`` sees the sandbox's module
    table, where names a class annotation refers to may be missing; hooks
    built here are cached on the shared converter and reused there.
    :func:`mango.temporal.worker.workflow_runner` calls it (workers and
    replayers, before any workflow runs); a client, which converts outside any
    sandbox, builds the few hooks it uses when it first uses them, and does
    not pay for all of them at import (about 50 ms of every durable command).
    """
    nested = (Command, ExecResult, PackagePlan, SandboxRef, SandboxSpec, ToolCall, ToolResult)
    messages = tuple(
        value
        for name, value in globals().items()
        if name in __all__ and isinstance(value, type) and attrs.has(value)
    )
    for cls in (*nested, *messages):
        attrs.resolve_types(cls)
    for cls in (*nested, *messages):
        converter.get_structure_hook(cls)
        converter.get_unstructure_hook(cls)
