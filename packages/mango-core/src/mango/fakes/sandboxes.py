"""The registry of fake sandboxes: real local process sandboxes behind a vendor-shaped record.

A vendor fake keeps its sandboxes here and translates the registry's answers
into its vendor's wire format. Each fake sandbox is a
:class:`mango.local.LocalSandbox` under the service's scratch directory, so
exec has real exit codes, stdin, process trees, timeouts and cancellation,
and files are real files.

Pause semantics (chosen for every vendor fake): a paused sandbox refuses new
data-plane calls (:meth:`FakeSandboxes.require_running` raises
:class:`SandboxPaused`, which the vendor fake answers its vendor's way) until
it is resumed. Commands already running when the pause arrives are *not*
frozen by the registry: a vendor fake whose vendor's pause keeps processes
freezes the ones it marked (:func:`mango.fakes.stop_marked`, as the
OpenSandbox fake does), and decides what its in-flight streams do. Delete
kills running commands (they end with ``cancelled=True``) and removes the
workspace; the record stays, in state ``deleted``, so a fake can tell
"deleted" from "never existed".
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from mango.domain.errors import InvalidInput, SandboxNotFound, SandboxNotRunning
from mango.domain.values import (
    Command,
    ExecEvent,
    ExecResult,
    OutputChunk,
    OutputStream,
    SandboxSpec,
)
from mango.fakes.beacons import Beacon, open_beacon
from mango.fakes.reaper import kill_marked
from mango.local import LocalProvider
from mango.local.sandbox import LocalSandbox

__all__ = ["FakeSandbox", "FakeSandboxes", "SandboxPaused", "SandboxState"]


class SandboxState(enum.StrEnum):
    """Where a fake sandbox is in its life."""

    RUNNING = "running"
    PAUSED = "paused"
    DELETED = "deleted"


SandboxPaused = SandboxNotRunning
"""A data-plane call reached a paused fake sandbox; the vendor fake refuses it its vendor's way."""


@attrs.define(eq=False)
class FakeSandbox:
    """One fake sandbox: the vendor-visible record and the local sandbox that does the work."""

    id: str
    """The vendor-visible sandbox id."""
    metadata: dict[str, str]
    """Labels / metadata as the client sent them (ownership labels live here)."""
    token: str = attrs.field(repr=False)
    """A per-sandbox access token (for vendors with a data-plane token, such as envd)."""
    created_at: datetime
    """When it was created (UTC)."""
    local: LocalSandbox = attrs.field(repr=False)
    """The real process sandbox."""
    state: SandboxState = SandboxState.RUNNING
    """running, paused or deleted."""
    extra: dict[str, Any] = attrs.field(factory=dict)
    """Vendor-specific fields the fake wants to echo back (template, timeout, ...)."""

    def beacon(self, name: str) -> AbstractAsyncContextManager[Beacon]:
        """A :class:`~mango.fakes.beacons.Beacon` named ``name`` in the workspace root.

        ``async with record.beacon("started") as started:``, start a command
        that runs ``echo up > started``, then ``await started.wait(10)``.
        """
        return open_beacon(self.local.root, name)


async def _buffered_stream(
    sandbox: LocalSandbox, command: Command
) -> AsyncGenerator[ExecEvent, None]:
    # Stand-in for LocalSandbox.exec_stream: the same event shape from a buffered exec.
    result = await sandbox.exec(command)
    if result.stdout:
        yield OutputChunk(OutputStream.STDOUT, result.stdout)
    if result.stderr:
        yield OutputChunk(OutputStream.STDERR, result.stderr)
    yield attrs.evolve(result, stdout=b"", stderr=b"")


@asynccontextmanager
async def _exec_events(
    sandbox: LocalSandbox, command: Command
) -> AsyncIterator[AsyncIterator[ExecEvent]]:
    events = _buffered_stream(sandbox, command)
    try:
        yield events
    finally:
        await events.aclose()


@attrs.define(eq=False)
class FakeSandboxes:
    """Every fake sandbox of one service, keyed by id.

    ``scratch_dir`` holds the local sandboxes; ``spec`` is their default spec
    (its ``timeout`` is the default command timeout); ``id_prefix`` starts
    generated ids.
    """

    scratch_dir: Path = attrs.field(converter=Path)
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)
    id_prefix: str = "sbx-"
    max_output_bytes: int = 1 << 20
    _provider: LocalProvider = attrs.field(init=False, repr=False)
    _records: dict[str, FakeSandbox] = attrs.field(init=False, factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        self._provider = LocalProvider(self.scratch_dir, max_output_bytes=self.max_output_bytes)

    async def create(
        self,
        metadata: Mapping[str, str] | None = None,
        *,
        sandbox_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> FakeSandbox:
        """Create a running sandbox; ``sandbox_id`` defaults to a fresh random id.

        Raises :class:`InvalidInput` if ``sandbox_id`` is already taken (even by
        a deleted sandbox: vendors do not reuse ids).
        """
        identifier = sandbox_id or f"{self.id_prefix}{secrets.token_hex(8)}"
        if identifier in self._records:
            raise InvalidInput(f"fake sandbox id {identifier!r} is already taken")
        local = await self._provider.create(identifier, self.spec)
        record = FakeSandbox(
            id=identifier,
            metadata=dict(metadata or {}),
            token=secrets.token_urlsafe(24),
            created_at=datetime.now(UTC),
            local=local,
            extra=dict(extra or {}),
        )
        self._records[identifier] = record
        return record

    def find(self, sandbox_id: str) -> FakeSandbox | None:
        """The record of ``sandbox_id`` in any state (deleted included), or ``None``."""
        return self._records.get(sandbox_id)

    def live(self, sandbox_id: str) -> FakeSandbox | None:
        """The live (running or paused) sandbox, or ``None`` (never existed, or deleted)."""
        record = self._records.get(sandbox_id)
        if record is None or record.state is SandboxState.DELETED:
            return None
        return record

    def get(self, sandbox_id: str) -> FakeSandbox:
        """The live (running or paused) sandbox; :class:`SandboxNotFound` otherwise."""
        record = self.live(sandbox_id)
        if record is None:
            raise SandboxNotFound(f"fake sandbox {sandbox_id!r} does not exist")
        return record

    def require_running(self, sandbox_id: str) -> FakeSandbox:
        """The running sandbox; :class:`SandboxNotFound` or :class:`SandboxPaused` otherwise."""
        record = self.get(sandbox_id)
        if record.state is SandboxState.PAUSED:
            raise SandboxPaused(f"fake sandbox {sandbox_id!r} is paused")
        return record

    def list(
        self, metadata: Mapping[str, str] | None = None, *, include_deleted: bool = False
    ) -> list[FakeSandbox]:
        """Sandboxes whose metadata contains every pair of ``metadata``, oldest first."""
        wanted = dict(metadata or {})
        return [
            record
            for record in self._records.values()
            if (include_deleted or record.state is not SandboxState.DELETED)
            and all(record.metadata.get(key) == value for key, value in wanted.items())
        ]

    def pause(self, sandbox_id: str) -> FakeSandbox:
        """Pause a live sandbox (idempotent); see the module docstring for what that means."""
        record = self.get(sandbox_id)
        record.state = SandboxState.PAUSED
        return record

    def resume(self, sandbox_id: str) -> FakeSandbox:
        """Resume a live sandbox (idempotent)."""
        record = self.get(sandbox_id)
        record.state = SandboxState.RUNNING
        return record

    async def delete(self, sandbox_id: str) -> bool:
        """Kill its commands, remove its workspace; ``False`` if it was already gone.

        Also the way a test deletes a sandbox behind the client's back.
        """
        record = self._records.get(sandbox_id)
        if record is None or record.state is SandboxState.DELETED:
            return False
        record.state = SandboxState.DELETED
        await record.local.destroy()
        # The processes that left their group (setsid) die with the sandbox too.
        kill_marked(sandbox_id)
        return True

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        """Run ``command`` in the running sandbox and return its buffered result."""
        return await self.require_running(sandbox_id).local.exec(command)

    @asynccontextmanager
    async def exec_stream(
        self, sandbox_id: str, command: Command
    ) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        """Run ``command``; yield its events (chunks, then one final :class:`ExecResult`).

        Leaving the block early ends the command (once the local provider streams).
        """
        local = self.require_running(sandbox_id).local
        # lead: switch to exec_stream -- `async with local.exec_stream(command) as events:`
        async with _exec_events(local, command) as events:
            yield events

    async def read_file(self, sandbox_id: str, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a workspace-relative file of the running sandbox (local provider rules).

        Bounded like every ``read_file``: :class:`FileTooLarge` past ``max_bytes``
        (default: the local provider's read cap).
        """
        return await self.require_running(sandbox_id).local.read_file(path, max_bytes=max_bytes)

    @asynccontextmanager
    async def open_file(self, sandbox_id: str, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a workspace-relative file of the running sandbox in chunks (a download)."""
        async with self.require_running(sandbox_id).local.open_file(path) as chunks:
            yield chunks

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        """Write a workspace-relative file of the running sandbox (local provider rules)."""
        await self.require_running(sandbox_id).local.write_file(path, data)

    async def close(self) -> None:
        """Delete every live sandbox (the service is stopping)."""
        for record in list(self._records.values()):
            await self.delete(record.id)
