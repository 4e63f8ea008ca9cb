"""Ports: the protocols the application layer talks to.

Every I/O port is async. Implementations translate their library's
exceptions into :mod:`mango.domain.errors` in one place, so callers only ever
see the mango error tree.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

from mango.domain.capabilities import CapabilitySet
from mango.domain.fleet import FleetRecords
from mango.domain.resource_ports import (
    FileResourceSandbox,
    LimitedNetworkSandbox,
    MemoryStoreSandbox,
    PackageSetupSandbox,
    ResourceLockSandbox,
    SessionOutputSandbox,
    SkillBundleSandbox,
)
from mango.domain.sandbox_ports import (
    FileSystemSandbox,
    PausableProvider,
    PausableSandbox,
    PortSandbox,
    ProcessSandbox,
)
from mango.domain.values import (
    Binding,
    Command,
    ExecEvent,
    ExecResult,
    OwnedResource,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SessionRecord,
)

__all__ = [
    "BindingStore",
    "Clock",
    "FileResourceSandbox",
    "FileSystemSandbox",
    "KeepAliveSandbox",
    "LimitedNetworkSandbox",
    "MemoryStoreSandbox",
    "PackageSetupSandbox",
    "PausableProvider",
    "PausableSandbox",
    "PortSandbox",
    "ProcessSandbox",
    "Provider",
    "PurgingProvider",
    "ResourceLockSandbox",
    "Sandbox",
    "SessionOutputSandbox",
    "SkillBundleSandbox",
]


@runtime_checkable
class Sandbox(Protocol):
    """A live client for one provider resource.

    Paths are workspace-relative and follow :mod:`mango.domain.paths`; a path
    that would leave the workspace (``..``, absolute, through a symlink) raises
    :class:`~mango.domain.errors.PathEscapeError`.
    """

    @property
    def ref(self) -> SandboxRef:
        """The durable reference of this resource."""
        ...

    @property
    def root(self) -> str:
        """The workspace root as the sandbox sees it (``/workspace`` in containers)."""
        ...

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command`` in the workspace and return what it produced.

        * A non-zero exit is data, not an error.
        * On timeout the command's whole process tree is terminated and the
          result has ``timed_out=True``; the sandbox stays usable unless the
          provider documents otherwise.
        * Cancelling the awaiting task terminates the command's process tree
          and re-raises :class:`asyncio.CancelledError` promptly; a task
          cancelled before the call runs nothing.
        * Each of stdout and stderr is capped; bytes past the cap are drained
          and discarded (memory stays O(cap)) and the truncation flag is set.
        * A destroy of the sandbox while the command runs, by this client or
          by any other process (another worker, ``mango sessions delete``),
          ends it: the result has ``cancelled=True`` and ``exit_code=-1``.
        * Raises :class:`SandboxNotFound` if the resource is gone when the
          call starts, :class:`ProviderUnavailable` for transient backend
          failures.
        """
        ...

    def exec_stream(
        self, command: Command
    ) -> AbstractAsyncContextManager[AsyncIterator[ExecEvent]]:
        """Run ``command`` and deliver its output as it arrives.

        Used as ``async with sandbox.exec_stream(cmd) as events: async for event in events``.
        The iterator yields :class:`~mango.domain.values.OutputChunk` values in
        the order the provider received them (at most the cap per stream in
        total; bytes past it are drained and dropped), then exactly one
        :class:`ExecResult` whose ``stdout``/``stderr`` are empty and whose exit
        code and flags are final. The same timeout, cancellation and cap rules
        as :meth:`exec` apply; leaving the block before the result (or
        cancelling the task) terminates the command's process tree.
        ``exec`` is the buffered form of the same stream.
        """
        ...

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of a regular file of at most ``max_bytes``.

        Bounded at the source: the size is checked first and the content is
        read in chunks, stopping past the bound, so memory stays O(bound) even
        for a sparse or growing file. ``max_bytes=None`` means the provider's
        read cap (``MANGO_MAX_READ_BYTES``). Raises :class:`FileTooLarge`
        (with ``size`` and ``limit``) past the bound: use :meth:`open_file` for
        large files. Raises :class:`FileNotFoundError` if it does not exist, a
        :class:`PermanentError` if it is not a regular file, and
        :class:`PathEscapeError` for escapes.
        """
        ...

    def open_file(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream a regular file's bytes in chunks, whatever its size.

        ``async with sandbox.open_file(path) as chunks: async for chunk in chunks``.
        Memory stays O(chunk); leaving the block early releases the transfer.
        The same path rules and errors as :meth:`read_file` (raised on entry).
        """
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate a file with ``data``, creating parent directories."""
        ...

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Create or replace a file with the bytes ``chunks`` yields, whatever their total size.

        The streamed form of :meth:`write_file` (as :meth:`open_file` is of
        :meth:`read_file`): memory stays O(chunk). The same path rules and
        errors as :meth:`write_file`, raised before a byte is consumed; parent
        directories are created. Atomic at the final name: the bytes go to a
        temporary sibling that replaces ``path`` only once every chunk has
        arrived, so a write that fails midway (the source raises, the
        transfer breaks, the task is cancelled) leaves the old file intact
        and removes the temporary; never a half-written file under ``path``.
        A chunk that is not bytes is :class:`InvalidInput`.
        """
        ...

    async def destroy(self) -> None:
        """Remove the resource and everything in it. Idempotent: a second call succeeds."""
        ...


@runtime_checkable
class Provider(Protocol):
    """A sandbox backend. One resource per Session key.

    Implementations must be safe to construct many times: a fresh instance
    (a restarted worker) attaches to what an earlier one created.
    """

    @property
    def name(self) -> str:
        """Stable lowercase provider name; it is persisted in references."""
        ...

    @property
    def capabilities(self) -> CapabilitySet:
        """What this provider instance implements; must equal its registration."""
        ...

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        """Create-if-absent the resource for ``session_key``.

        Idempotent through a provider-side key derived from ``session_key``: a
        retry after a lost response returns the same resource (same ``ref``,
        workspace preserved). Raises :class:`InvalidInput` for an empty key.
        """
        ...

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        """Rebuild a client from a persisted reference, verifying ownership.

        Raises :class:`OwnershipError` if ``ref`` names another provider or
        belongs to another Session key, and :class:`SandboxNotFound` if the
        resource no longer exists (never creates a replacement).
        """
        ...

    async def find(self, session_key: str) -> SandboxRef | None:
        """Return the reference of the resource that carries ``session_key``'s ownership, or None.

        Read-only: never creates, starts or resumes anything. Raises
        :class:`ProviderUnavailable` if the backend cannot answer.
        """
        ...

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Remove the resource ``ref`` of ``session_key`` without attaching to it.

        Idempotent (a resource already gone is success). Ownership is checked by
        the provider's own records (labels, metadata, names), never by trusting
        anything inside the sandbox; raises :class:`OwnershipError` if ``ref``
        belongs to another Session key or deployment.
        """
        ...

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every resource this deployment (namespace) owns at this provider, in any state."""
        ...

    async def health(self) -> str:
        """Make a real round trip to the backend and return a one-line description.

        Raises :class:`ProviderUnavailable` if it cannot be reached and
        :class:`ConfigurationError` if it refuses the configured credentials.
        """
        ...

    async def aclose(self) -> None:
        """Release client resources (connections); resources themselves stay."""
        ...


@runtime_checkable
class PurgingProvider(Protocol):
    """A provider that keeps state for a Session beside the resource itself.

    Host directories, owner records, the leftovers of a removal or a create
    that a crash interrupted: a provider that has such state implements
    :meth:`purge`, and SessionManager calls it when a deletion has no bound
    reference to destroy (an intent-only Session, a crash between steps) and
    for a forced deletion. Remote providers whose only state is the remote
    resource need not implement it.
    """

    async def purge(self, session_key: str, *, force: bool = False) -> None:
        """Remove everything this provider holds for ``session_key`` in this namespace.

        Found by the names and records the key determines (never by
        attaching, never by trusting anything inside the sandbox), including
        the leftovers of an interrupted create or destroy; commands still
        running in it are stopped. Idempotent: nothing left is success.
        Raises :class:`OwnershipError` if a resource under the key's name
        carries another owner. With ``force=True`` missing, unreadable or
        contradictory records do not stop it: whatever mango owns under the
        key's deterministic names is removed (never following a link), and a
        resource that verifiably belongs to someone else is left alone.
        """
        ...


class BindingStore(FleetRecords, Protocol):
    """Durable Session, intent and binding records: the source of truth.

    Insert-if-absent operations return the authoritative row; deletes remove
    only a row that still matches the caller's value. No credential is ever
    stored. The fleet's methods (the sandbox limit, last use, idle eviction)
    are :class:`~mango.domain.fleet.FleetRecords`'.
    """

    async def deployment_namespace(self) -> str:
        """This deployment's namespace: generated once per store, then always the same.

        Every ownership label and deterministic name a provider makes carries
        it, so two deployments sharing a backend never see each other's
        resources.
        """
        ...

    async def ensure_session(self, session_id: str) -> SessionRecord:
        """Create the Session row if absent and return the stored row."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """Return the Session row, or None."""
        ...

    async def list_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Sessions, oldest first."""
        ...

    async def fence_session(self, session_id: str) -> SessionRecord | None:
        """Set the deletion fence (idempotent); None if the Session does not exist."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete a fenced Session with no binding or intent left.

        Returns False if it was already gone. Raises
        :class:`PreconditionFailed` if it is not fenced or still has a
        binding or an intent.
        """
        ...

    async def list_deleting_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Fenced Sessions, oldest fence first."""
        ...

    async def get_intent(self, session_id: str) -> ProvisioningIntent | None:
        """Return the provisioning intent, or None."""
        ...

    async def put_intent(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        """Insert-if-absent; return the stored intent (which may differ from ``intent``).

        Raises :class:`ProvisioningBlocked` if the Session is absent, fenced or
        already bound.
        """
        ...

    async def list_intents(self, provider: str, limit: int = 100) -> Sequence[ProvisioningIntent]:
        """That provider's intents, oldest first, with ``deleting`` projected."""
        ...

    async def delete_intent(self, intent: ProvisioningIntent) -> None:
        """Compare-and-delete on (session, provider, spec hash).

        Success if gone; :class:`PreconditionFailed` if a different intent is there.
        """
        ...

    async def get_binding(self, session_id: str) -> Binding | None:
        """Return the binding, or None."""
        ...

    async def put_binding(self, binding: Binding) -> Binding:
        """Insert-if-absent and delete the Session's intent in one transaction.

        Returns the winner, which may be another worker's binding.
        """
        ...

    async def delete_binding(self, binding: Binding) -> None:
        """Compare-and-delete on (session, provider, external id).

        Success if gone; :class:`PreconditionFailed` if a different binding is there.
        """
        ...

    async def mark_binding_lost(self, session_id: str, ref: SandboxRef) -> Binding | None:
        """Persist that the resource ``ref`` bound to ``session_id`` no longer exists.

        Compare-and-set on (session, provider, external id) and idempotent: the
        first mark's time is kept. Returns the stored binding (``lost`` true),
        or None if the Session is no longer bound to ``ref``, so a stale client
        never marks a newer binding. A pause mark goes with the loss.
        """
        ...

    async def mark_paused(
        self, session_id: str, ref: SandboxRef, *, idle_for: float | None = None
    ) -> Binding | None:
        """Set the pause mark on the binding of ``ref``, before the provider pauses it.

        Idempotent (the first mark's time is kept). With ``idle_for`` it is
        the idle eviction's compare-and-set on the last use, as
        :meth:`~mango.domain.fleet.FleetRecords.mark_evicted`: only a binding
        unused for ``idle_for`` seconds and not yet paused is marked. Returns
        the marked binding, or None (no longer bound to ``ref``, lost,
        evicted, fenced, or used since). While the mark is set,
        :meth:`~mango.domain.fleet.FleetRecords.record_use` answers False and
        :meth:`get_session` projects it as ``paused_at``.
        """
        ...

    async def finish_pause(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the provider confirmed the pause of ``ref``; idempotent.

        :meth:`~mango.domain.fleet.FleetRecords.list_idle` lists a paused
        binding until then, so the eviction pass finishes a pause a crash
        interrupted.
        """
        ...

    async def clear_paused(self, session_id: str, ref: SandboxRef) -> None:
        """Remove the pause mark of ``ref``, after the provider resumed it; idempotent."""
        ...


class Clock(Protocol):
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


# ---------------------------------------------------------------------------
# Optional sandbox protocols. A provider that declares a capability must give
# sandboxes that implement its protocol. A capability's protocol enters this
# module (and the provider surface) only together with a provider that
# implements it and conformance checks for it. File resources, session
# outputs and the resource lock are in mango.domain.resource_ports (Docker
# implements them); the file API, background processes, pause and exposed
# ports in mango.domain.sandbox_ports; skill bundles and memory stores have
# none yet.


@runtime_checkable
class KeepAliveSandbox(Protocol):
    """A sandbox that the backend may pause or expire when idle (E2B, Cube, Daytona).

    SessionManager calls :meth:`keep_alive` on every acquire, cached client or
    not, before handing the sandbox out, so a Session in use is never paused
    under a tool step.
    """

    async def keep_alive(self) -> None:
        """Resume the sandbox if it is paused and extend its idle deadline.

        Raises :class:`SandboxNotFound` if it is gone.
        """
        ...
