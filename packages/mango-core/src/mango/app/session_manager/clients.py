"""Live clients: the loss-recording sandbox SessionManager hands out, its cache and locks.

The cache is only a cache: the BindingStore is the truth, and the one
observation path (:func:`~mango.app.session_manager.context.observe_session`)
drops an entry whose Session row was fenced or re-created.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Generic, TypeVar

import attrs

from mango.app.wrappers import SandboxWrapper, stream_into
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import CapabilityNotSupported, SandboxNotFound
from mango.domain.ports import KeepAliveSandbox, Sandbox
from mango.domain.sandbox_ports import (
    DEFAULT_LIST_LIMIT,
    DirectoryListing,
    FileInfo,
    FileSystemSandbox,
)
from mango.domain.values import Command, ExecEvent, ExecResult, SandboxRef, SessionRecord

__all__ = [
    "CachedClient",
    "ClientCache",
    "LossReporter",
    "RecentUses",
    "SessionLocks",
    "SessionSandbox",
]

LossRecorder = Callable[[SandboxNotFound], Awaitable[None]]
"""Records that one client's resource is gone (bound to its Session and reference)."""

LossReporter = Callable[[str, SandboxRef, SandboxNotFound], Awaitable[None]]
"""``(session id, reference, error)``: called when a handed-out client meets a loss."""

_Event = TypeVar("_Event")
_T = TypeVar("_T")


@attrs.define
class _Watched(Generic[_Event]):
    """A stream (exec events, file chunks) whose :class:`SandboxNotFound` records the loss."""

    events: AsyncIterator[_Event]
    on_lost: LossRecorder

    def __aiter__(self) -> _Watched[_Event]:
        return self

    async def __anext__(self) -> _Event:
        try:
            return await self.events.__anext__()
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise


@attrs.define
class SessionSandbox(SandboxWrapper):
    """The client SessionManager hands out.

    A :class:`SandboxNotFound` from any operation evicts the cached client and
    persists the loss before it propagates, so the next acquire (on any
    worker) fails as ``lost`` instead of trusting a dead client.

    The file API (``list_dir``, ``stat``, ``exists``, ``remove``, ``rename``,
    ``make_dir``; :class:`~mango.domain.sandbox_ports.FileSystemSandbox`) is
    here whatever the provider: where it does not declare ``file-api`` each
    call raises :class:`CapabilityNotSupported` before reaching the sandbox.
    """

    on_lost: LossRecorder = attrs.field(kw_only=True)
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet, kw_only=True)
    """The provider's declared capabilities: an operation of one it lacks is refused."""

    async def _watch(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    def _file_api(self) -> FileSystemSandbox:
        """The wrapped sandbox as a file API, or :class:`CapabilityNotSupported`."""
        provider = self.inner.ref.provider
        if Capability.FILE_API not in self.capabilities or not isinstance(
            self.inner, FileSystemSandbox
        ):
            raise CapabilityNotSupported(
                provider,
                [f"{provider} does not support {Capability.FILE_API.description}"],
                hint="read and write files (mango files read/write) or run ls, rm, mv and "
                "mkdir with mango exec; or choose a provider that declares file-api "
                "(mango providers lists them)",
            )
        return self.inner

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        """List the directory ``path`` (capability ``file-api``; see FileSystemSandbox)."""
        files = self._file_api()
        return await self._watch(files.list_dir(path, recursive=recursive, limit=limit))

    async def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names, never following a last-component link (``file-api``)."""
        return await self._watch(self._file_api().stat(path))

    async def exists(self, path: str) -> bool:
        """Whether ``path`` names an entry (``file-api``)."""
        return await self._watch(self._file_api().exists(path))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a link or a directory (its tree with ``recursive``; ``file-api``)."""
        await self._watch(self._file_api().remove(path, recursive=recursive))

    async def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination``, which must not exist (``file-api``)."""
        await self._watch(self._file_api().rename(source, destination))

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Create the directory ``path`` (``mkdir -p`` with ``parents``; ``file-api``)."""
        await self._watch(self._file_api().make_dir(path, parents=parents))

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command``; a vanished resource is recorded as lost."""
        try:
            return await self.inner.exec(command)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    @asynccontextmanager
    async def exec_stream(self, command: Command) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        """Stream ``command``'s output; a vanished resource is recorded as lost."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                events = await stack.enter_async_context(self.inner.exec_stream(command))
            except SandboxNotFound as exc:
                await self.on_lost(exc)
                raise
            yield _Watched(events, self.on_lost)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read ``path`` (bounded); a vanished resource is recorded as lost."""
        try:
            return await self.inner.read_file(path, max_bytes=max_bytes)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    @asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``path``; a vanished resource is recorded as lost."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(self.inner.open_file(path))
            except SandboxNotFound as exc:
                await self.on_lost(exc)
                raise
            yield _Watched(chunks, self.on_lost)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``path``; a vanished resource is recorded as lost."""
        try:
            await self.inner.write_file(path, data)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Stream ``chunks`` into ``path`` (atomic); a vanished resource is recorded as lost."""
        try:
            await stream_into(self.inner, path, chunks)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise


@attrs.define
class CachedClient:
    """A live client cached for one Session row."""

    raw: Sandbox
    """The provider's client, used for keep-alive and network policy."""
    sandbox: SessionSandbox
    """What callers receive."""
    spec_hash: str
    """The binding's spec hash: it stands for the binding's package proof."""
    session_created_at: datetime
    """Creation time of the Session row the client was cached for: a Session
    deleted and re-created elsewhere under the same id never reuses it."""
    network_hosts: tuple[str, ...] | None = None
    """The final allowlist last applied through this client (limited network only)."""
    keep_alive: KeepAliveSandbox | None = None
    """``raw`` if it implements keep-alive: checked once here, not on every acquire
    (a runtime protocol check costs more than the rest of a cached acquire)."""


@attrs.define
class RecentUses:
    """When this process last wrote each Session's use, so the next write can wait.

    The idle eviction needs a Session's last use, not every use: one write
    per Session and interval (at acquire) keeps a busy Session's turns free
    of round trips. Monotonic time, per binding reference.
    """

    _written: dict[str, tuple[SandboxRef, float]] = attrs.field(factory=dict, init=False)

    def recent(self, session_id: str, ref: SandboxRef, interval: float) -> bool:
        """True if this process wrote the use of ``ref`` less than ``interval`` seconds ago."""
        written = self._written.get(session_id)
        if written is None or written[0] != ref:
            return False
        return time.monotonic() - written[1] < interval

    def note(self, session_id: str, ref: SandboxRef) -> None:
        """The use of ``ref`` was written now."""
        self._written[session_id] = (ref, time.monotonic())

    def forget(self, session_id: str) -> None:
        """Write the Session's next use whatever the interval."""
        self._written.pop(session_id, None)


@attrs.define
class ClientCache:
    """Session id -> its live client; a loss met by a handed-out client goes to ``report_loss``."""

    report_loss: LossReporter
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet, kw_only=True)
    """The provider's declared capabilities, given to every client handed out."""
    uses: RecentUses = attrs.field(factory=RecentUses, init=False)
    """When this process last wrote each Session's use (forgotten with its client)."""
    _entries: dict[str, CachedClient] = attrs.field(factory=dict, init=False)

    def get(self, session_id: str) -> CachedClient | None:
        """The cached client of ``session_id``, if any."""
        return self._entries.get(session_id)

    def remember(
        self, session_id: str, raw: Sandbox, binding_hash: str, record: SessionRecord
    ) -> CachedClient:
        """Cache ``raw`` for the Session row ``record`` and return the entry.

        Its use counts as written now: a client is remembered right after the
        binding was published or the use recorded before the attach.
        """
        ref, report = raw.ref, self.report_loss

        async def on_lost(exc: SandboxNotFound) -> None:
            await report(session_id, ref, exc)

        keep_alive = raw if isinstance(raw, KeepAliveSandbox) else None
        entry = CachedClient(
            raw,
            SessionSandbox(raw, on_lost=on_lost, capabilities=self.capabilities),
            binding_hash,
            record.created_at,
            keep_alive=keep_alive,
        )
        self._entries[session_id] = entry
        self.uses.note(session_id, ref)
        return entry

    def forget(self, session_id: str, ref: SandboxRef | None = None) -> None:
        """Drop the Session's client (only if it is for ``ref``, when given)."""
        cached = self._entries.get(session_id)
        if cached is not None and (ref is None or cached.raw.ref == ref):
            del self._entries[session_id]
        self.uses.forget(session_id)

    def clear(self) -> None:
        """Forget every client."""
        self._entries.clear()
        self.uses = RecentUses()


@attrs.define
class SessionLocks:
    """Per-Session asyncio locks, dropped when the last user leaves."""

    _locks: dict[str, tuple[asyncio.Lock, int]] = attrs.field(factory=dict, init=False)

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold the Session's lock for the block."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)
