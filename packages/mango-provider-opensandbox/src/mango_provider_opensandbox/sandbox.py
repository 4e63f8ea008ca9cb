"""The client for one OpenSandbox sandbox: exec through execd, files, egress allowlist."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs

from mango.provider import (
    Command,
    Entry,
    EntryKind,
    ExecResult,
    ExposedPort,
    InvalidInput,
    MangoError,
    NetworkMode,
    PathPolicy,
    PermanentError,
    ProtocolError,
    ProviderUnavailable,
    ResolvedPath,
    SandboxRef,
    SandboxSpec,
    check_port,
)
from mango.provider.execution import ExecHandle
from mango.provider.files import Download
from mango.provider.filesystem import NativeEntry, RemoteFileSystem
from mango.provider.http import RemoteUnavailable
from mango.provider.output import ExecChannel
from mango.provider.processes import ProcessRecord
from mango.provider.remote import RemoteSandbox
from mango.provider.shell import MAX_INLINE_LINE_BYTES, kill_tree_line, plan_command
from mango.provider.shellprocesses import ShellProcesses
from mango.provider.tasks import cancel_and_settle
from mango_provider_opensandbox.execd import LIST_DEPTH_ALL, Egress, Execd
from mango_provider_opensandbox.layout import EGRESS_PORT, EXECD_PORT, ROOT, STDIN_DIR
from mango_provider_opensandbox.network import reconcile
from mango_provider_opensandbox.remote import PAUSED_STATES, OpenSandboxRemote
from mango_provider_opensandbox.wire import (
    STREAMS,
    WRAPPER_OVERHEAD,
    ExecEnd,
    FrameDecoder,
    bounded_lines,
    exit_code_of,
    sse_events,
    wrap,
)

__all__ = ["EXIT_SIGNALLED", "INTERRUPT_SECONDS", "SERVER_TIMEOUT_GRACE", "OpenSandboxSandbox"]

SERVER_TIMEOUT_GRACE = 5.0
"""Seconds execd's own timeout trails mango's: mango decides (and reports) the timeout,
execd's kill is the backstop for a client that vanished."""
INTERRUPT_SECONDS = 5.0
"""Bound on the best-effort interrupt sent after a timeout."""
EXIT_SIGNALLED = -1
"""The exit code execd reports for a shell killed by a signal (Go's ``ExitCode()``).

The wrapper shell (:func:`~mango_provider_opensandbox.wire.wrap`) dies by a
signal only when its whole process group is signalled; a command killed on
its own (``kill -9``, the OOM killer) leaves the wrapper to report 128+n."""
_DOWNLOAD_CHUNK = 64 * 1024


@attrs.define
class _Run:
    command_id: str | None = None
    opened: bool = False
    """execd accepted the command: its event stream is open."""


@attrs.define(kw_only=True, eq=False)
class OpenSandboxSandbox(RemoteSandbox, RemoteFileSystem, ShellProcesses):
    """One OpenSandbox sandbox, from :class:`~mango_provider_opensandbox.OpenSandboxProvider`.

    Commands run through execd as an event stream; their output is framed by
    :mod:`mango_provider_opensandbox.wire` so it arrives byte-exact. Files go
    through execd's file API (the kit's :class:`~mango.provider.files.RemoteFiles`:
    every component stat-ed, links refused, reads bounded at the source), and
    so does the file API (``file-api``: the kit's
    :class:`~mango.provider.filesystem.RemoteFileSystem` over execd's
    ``/files/info``, ``/directories/list``, ``/files/mv``, ``DELETE /files``,
    ``DELETE /directories`` and ``POST /directories``). execd's move refuses
    an existing destination only as ``os.Stat`` sees it (a dangling link is
    overwritten) and follows a link as its source (a dangling one is "not
    found"); the kit checks the destination first. The egress allowlist goes
    through the sidecar.

    Background processes are execd's background commands under the kit's
    supervisor (:mod:`mango.provider.shellprocesses`): execd starts the
    supervisor as a process-group leader and keeps its output (read by byte
    cursor), ``interrupt`` ends the group; the supervisor adds what execd
    lacks (a listing, stdin through a FIFO, the exit status and the kill
    marker any worker reads, ``command.timeout`` as a kill).

    Pause and resume (``pause``) are the lifecycle API's (:meth:`pause`).

    A command whose sandbox is deleted while it runs ends with
    ``cancelled=True`` and exit code -1, whoever deleted it: this client's
    :meth:`destroy` is known at once; for another worker's (or
    ``mango sessions delete``) the lifecycle API is asked, but only when the
    command ended the way a teardown ends one (see :meth:`_torn_down`).
    """

    _provider: OpenSandboxRemote = attrs.field(repr=False)
    _ref: SandboxRef
    _network: str | None
    _spec: SandboxSpec
    _execd: Execd
    _path_policy: PathPolicy = attrs.field(factory=lambda: PathPolicy(ROOT), repr=False)
    _egress: Egress | None = attrs.field(default=None, repr=False)
    """The egress sidecar's client, made on first use."""

    # ---------------------------------------------------------------- pause

    async def pause(self) -> None:
        """Pause the sandbox (the lifecycle API's pause, waited for until Paused); idempotent.

        On the server's Docker runtime that is the cgroup freezer: every
        process keeps its memory, and a command running now is frozen with
        its event stream, which goes on after the resume. A data-plane call
        made while it is paused waits for the resume (a frozen execd), up to
        its request timeout. :class:`SandboxNotFound` if it is gone.
        """
        await self._provider.pause(self._ref.external_id)

    async def resume(self) -> None:
        """Resume the sandbox (waited for until Running); idempotent for a running one."""
        await self._provider.resume(self._ref.external_id)

    async def is_paused(self) -> bool:
        """The lifecycle API's word: is the sandbox Pausing or Paused now?"""
        return await self._provider.state(self._ref.external_id) in PAUSED_STATES

    # ---------------------------------------------------------------- exec

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        plan = plan_command(
            command.argv,
            stdin=command.stdin,
            cwd=command.cwd,
            env=command.env,
            staging_dir=STDIN_DIR,
            max_inline_line_bytes=MAX_INLINE_LINE_BYTES - WRAPPER_OVERHEAD,
        )
        with self._provider.tracker.track(self.sandbox_id) as handle:
            if command.cwd:
                # execd's shell cannot enter a cwd that does not exist: made as local makes it.
                await self._ensure_directory(command.cwd)
            if plan.stdin.staged and plan.stdin.path is not None:
                await self._execd.make_dirs({STDIN_DIR: 0o700})
                await self._execd.upload(plan.stdin.path, plan.stdin.data, mode=0o600)
            body: dict[str, object] = {"command": wrap(plan.line), "cwd": ROOT}
            if timeout is not None:
                body["timeout"] = math.ceil((timeout + SERVER_TIMEOUT_GRACE) * 1000)
            state = _Run()
            run = asyncio.ensure_future(self._stream(body, channel, state))
            destroyed = asyncio.ensure_future(handle.kill_requested.wait())
            try:
                done, _ = await asyncio.wait(
                    {run, destroyed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                destroyed.cancel()
                # Closing the stream is what ends the command: execd kills its
                # process group when the client goes away.
                await cancel_and_settle(run)
            if run in done:
                if await self._torn_down(run, state, handle):
                    return channel.result(exit_code=-1, cancelled=True)
                error = run.exception()
                if error is None:
                    return channel.result(exit_code=run.result())
                if plan.stdin.staged and plan.stdin.path is not None and state.command_id is None:
                    await self._forget_stdin(plan.stdin.path)
                raise error
            if handle.destroyed:
                return channel.result(exit_code=-1, cancelled=True)
            await self._interrupt(state)
            return channel.result(exit_code=-1, timed_out=True)

    async def _stream(self, body: dict[str, object], channel: ExecChannel, state: _Run) -> int:
        async with self._execd.command(body, timeout=self._provider.request_timeout) as response:
            state.opened = True
            async for event in sse_events(bounded_lines(response.aiter_bytes())):
                kind = event.get("type")
                stream = STREAMS.get(str(kind))
                if stream is not None:
                    data = FrameDecoder.decode(str(event.get("text", "")))
                    if data:
                        await channel.send(stream, data)
                elif kind == "init":
                    text = event.get("text")
                    state.command_id = text if isinstance(text, str) else None
                elif kind == ExecEnd.ERROR:
                    code = exit_code_of(event)
                    if code is None:
                        raise PermanentError(
                            f"execd could not start the command shell: {_reason(event)}"
                        )
                    return code
                elif kind == ExecEnd.COMPLETE:
                    # execd holds the stream open for a grace period after
                    # the last event; every output event came before it.
                    return 0
        raise RemoteUnavailable("run command: the event stream ended without an exit status")

    async def _torn_down(self, run: asyncio.Future[int], state: _Run, handle: ExecHandle) -> bool:
        """Whether the command that ``run`` ended was stopped by its sandbox being deleted.

        Only the ends a deletion produces are looked into: execd's
        :data:`EXIT_SIGNALLED` (its process group was signalled), or an event
        stream that broke after it opened (the server kills the sandbox, and
        execd with it, so the stream is cut without a terminal event). A
        completion, an ordinary exit code and a refused start cost nothing.
        This client's own destroy is known from ``handle``; anyone else's is
        asked of the lifecycle API through the kit's
        :func:`~mango.provider.execution.torn_down`. A probe that cannot
        answer leaves the command's own result or error.
        """
        error = run.exception()
        if error is None:
            shaped = run.result() == EXIT_SIGNALLED
        else:
            shaped = handle.destroyed or (state.opened and isinstance(error, ProviderUnavailable))
        if not shaped:
            return False
        return handle.destroyed or await self._provider.torn_down(self.sandbox_id)

    async def _interrupt(self, state: _Run) -> None:
        if state.command_id is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(INTERRUPT_SECONDS):
                await self._execd.interrupt(state.command_id)

    async def _forget_stdin(self, path: str) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(INTERRUPT_SECONDS):
                await self._execd.delete_file(path)

    # ---------------------------------------------------------------- background processes

    _launch_detach = False
    _launch_new_session = False  # execd starts its command with Setpgid: a group leader
    _vendor_log = True

    async def _launch(self, line: str, process_id: str) -> str | None:  # noqa: ARG002 - execd names it
        return await self._execd.start_background(
            line, cwd=ROOT, timeout=self._provider.request_timeout
        )

    async def _read_log(
        self, record: ProcessRecord, since: int, limit: int
    ) -> tuple[bytes, int, int]:
        if record.vendor is None:
            return b"", 0, 0  # started but never handed to execd: nothing was written
        # execd keeps the whole log (nothing dropped): its own file, its own disk.
        data, end = await self._execd.command_logs(record.vendor, since, limit)
        return data, end, 0

    async def _kill_tree(self, record: ProcessRecord, marker: str) -> None:
        await self._run(marker)
        if record.vendor is not None:
            try:
                # SIGTERM, then SIGKILL, to the group execd started: the supervisor and its tree.
                await self._execd.interrupt(record.vendor)
            except MangoError:
                pass  # execd saw it end, or lost it: the kit's own group kill below
            else:
                return
        if record.pid is not None:
            await self._run(kill_tree_line(record.pid))

    # ---------------------------------------------------------------- files (the kit's RemoteFiles)

    async def _stat(self, path: str) -> Entry | None:
        return await self._execd.stat(path)

    @asynccontextmanager
    async def _download(self, resolved: ResolvedPath, path: str) -> AsyncIterator[Download]:
        async with self._execd.download(resolved.path, shown=path) as response:
            yield Download(response.aiter_bytes(_DOWNLOAD_CHUNK))

    async def _make_dirs(self, paths: tuple[str, ...]) -> None:
        await self._execd.make_dirs(dict.fromkeys(paths, 0o755))

    async def _upload(self, path: str, data: bytes) -> None:
        await self._execd.upload(path, data, mode=0o644)

    async def _upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        await self._execd.upload_stream(path, chunks, mode=0o644)

    async def _replace(self, source: str, destination: str) -> None:
        # execd's mv refuses an existing destination: the old file goes first. Between
        # the two calls the name is missing for a moment; it never holds a half file.
        await self._execd.delete_file(destination)
        await self._execd.move(source, destination)

    async def _discard(self, path: str) -> None:
        await self._execd.delete_file(path)

    # ---------------------------------------------------------------- the file API

    sorted_listing = True  # execd reads each directory with os.ReadDir: in name order

    async def _entry_info(self, path: str) -> NativeEntry | None:
        return await self._execd.info(path)

    @asynccontextmanager
    async def _listing(
        self, path: str, *, recursive: bool
    ) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        depth = LIST_DEPTH_ALL if recursive else 1
        async with self._execd.list_directory(path, depth=depth) as entries:
            yield entries

    async def _move(self, source: str, destination: str) -> None:
        await self._execd.move(source, destination)

    async def _delete(self, entry: NativeEntry, *, recursive: bool) -> None:
        del recursive  # the kit checked a directory's emptiness
        if entry.kind is EntryKind.REGULAR:
            await self._execd.delete_file(entry.path)
        else:
            # DELETE /files follows a link (os.Stat) and keeps a dangling one; RemoveAll
            # removes a link itself, a directory with its tree, anything else as it is.
            await self._execd.remove_tree(entry.path)

    async def _create_dir(self, path: str) -> None:
        await self._execd.make_dirs({path: 0o755})

    # ---------------------------------------------------------------- ports

    async def expose_port(self, port: int) -> ExposedPort:
        """The endpoint the server resolves for ``port`` (``GET /sandboxes/{id}/endpoints/{port}``).

        Direct, or through the server's proxy (``/sandboxes/{id}/proxy/{port}``)
        with ``OPEN_SANDBOX_USE_SERVER_PROXY``, as the data plane goes; the
        endpoint's headers (an ingress route, a secure-access or execd token)
        come with it. The API key is never among them: the server proxy
        needs none and strips it. execd's and the egress sidecar's ports are
        mango's control plane and are refused (:class:`InvalidInput`).
        """
        check_port(port)
        if port in (EXECD_PORT, EGRESS_PORT):
            daemon = "execd" if port == EXECD_PORT else "egress sidecar"
            raise InvalidInput(
                f"port {port} is OpenSandbox's {daemon}, which mango does not expose",
                hint="serve on another port",
            )
        endpoint = await self._provider.lifecycle.endpoint(
            self.sandbox_id, port, server_proxy=self._provider.server_proxy
        )
        try:
            return ExposedPort(endpoint.url, endpoint.headers)
        except ValueError as exc:
            raise ProtocolError(
                f"resolve sandbox endpoint: the server's endpoint for port {port} is not a plain "
                "http(s) URL"
            ) from exc

    # ---------------------------------------------------------------- network

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        """Make the egress allowlist exactly ``allowed_hosts`` (deny everything else).

        Compares the sidecar's policy by hash first, so an unchanged policy
        costs one read; a drifted one is repaired. :class:`PermanentError`
        if the sandbox was not created deny-by-default.
        """
        if self._network == NetworkMode.BRIDGE.value:
            raise PermanentError(
                f"OpenSandbox sandbox {self._ref.external_id} was created with unrestricted "
                "network (no egress sidecar); an allowlist cannot restrict it",
                hint="delete the session and create it again with network 'limited'",
            )
        if self._egress is None:
            self._egress = await self._provider.egress(self.sandbox_id)
        await reconcile(self._egress, list(allowed_hosts))


def _reason(event: dict[str, object]) -> str:
    error = event.get("error")
    value = error.get("evalue") if isinstance(error, dict) else event.get("evalue")
    return str(value)[:200]
