"""One E2B (or Cube) sandbox as mango sees it: exec through envd, files, keep-alive, destroy.

Exec is envd's ``process.Process/Start`` server stream, read as it arrives:
each ``data`` event goes to the kit's :class:`~mango.provider.output.ExecChannel`
(capped at the source; bytes past the cap are drained and dropped, so memory
stays O(cap) whatever the command prints). The command is one shell line
(:mod:`mango.provider.shell`) run by ``/bin/bash -l -c`` as envd's clients
do, in a new session (``setsid``) so that a timeout, a cancellation or
leaving the stream kills its whole process tree: envd only ever signals the
pid it started and never kills a command whose stream was closed, so the
sandbox runs ``kill -KILL -- -<pid>`` itself. Stdin travels through
``SendInput`` in chunks, then ``CloseStdin`` (any size).

The data plane's answer for a sandbox it cannot reach is a 502 from the
proxy; only the control plane can say whether that sandbox is gone (404:
:class:`SandboxNotFound`), paused (resumed once, and the call that never
reached envd is repeated) or there (the error stands, retryable).

A command ends with ``cancelled=True`` (exit code -1) when its sandbox is
destroyed while it runs: by this client (:attr:`ExecHandle.destroyed`), or
elsewhere (another worker, ``mango sessions delete``). E2B kills the
sandbox's VM with envd inside, so the command's stream is cut; a command
killed by SIGKILL (137) or whose stream was cut or failed makes the client
ask the control plane whether the sandbox is gone (the kit's
:func:`~mango.provider.execution.torn_down`). Any other end costs no
control-plane call.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import attrs

from mango.provider import (
    Command,
    Entry,
    ExecResult,
    FileTooLarge,
    InvalidInput,
    MangoError,
    OutputStream,
    PathPolicy,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    file_not_found,
)
from mango.provider.execution import (
    TEARDOWN_SETTLE_SECONDS,
    ExecTracker,
    StreamedExec,
    torn_down,
)
from mango.provider.http import ApiClient, RemoteUnavailable
from mango.provider.output import ExecChannel
from mango.provider.reads import read_limit
from mango.provider.shell import MAX_INLINE_LINE_BYTES, command_line, kill_tree_line, plan_command
from mango_provider_e2b.connect import Envelope
from mango_provider_e2b.control import ControlPlane, SandboxInfo, SandboxState
from mango_provider_e2b.envd import Envd, EnvdAddress, exit_code_of

__all__ = ["ROOT", "E2BSandbox", "Remote"]

T = TypeVar("T")

ROOT = "/workspace"
"""The workspace root inside every sandbox (created at create time)."""
SHELL = "/bin/bash"
"""envd's clients run commands with ``bash -l -c``: the template's login environment."""
STDIN_CHUNK_BYTES = 256 * 1024
"""Stdin bytes per ``SendInput`` (about 350 KB of JSON each)."""
SERVER_GRACE_SECONDS = 15.0
"""envd's own deadline trails mango's by this much: a backstop if the worker vanishes."""
KILL_SECONDS = 5.0
"""Bound on killing a command's tree after a timeout or cancellation."""
DRAIN_SECONDS = 5.0
"""How long the output of a killed command is still read."""
KEEP_MARGIN_SECONDS = 30.0
"""A sandbox must outlive the current operation by at least this much."""
_CLOSE_STDIN_SINCE = (0, 5, 2)
"""The envd version that has ``CloseStdin``; older ones get stdin inline in the line."""
_EXIT_KILLED = 128 + signal.SIGKILL
"""A command killed by SIGKILL: its own doing (``kill -9``, OOM) or its sandbox's teardown."""


def _version(text: str | None) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in (text or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


@attrs.define(eq=False)
class Remote:
    """What every sandbox of one provider instance shares: clients, settings, tracker."""

    provider: str
    control: ControlPlane
    data: ApiClient
    address: Callable[[SandboxInfo], EnvdAddress]
    idle_timeout: float
    max_output_bytes: int
    max_read_bytes: int
    tracker: ExecTracker = attrs.field(factory=ExecTracker)


def _event(envelope: Envelope) -> tuple[str, dict[str, Any]]:
    event = envelope.payload.get("event")
    if isinstance(event, dict):
        for kind in ("start", "data", "end", "keepalive"):
            value = event.get(kind)
            if isinstance(value, dict):
                return kind, value
    return "unknown", {}


def _chunk(value: dict[str, Any]) -> tuple[OutputStream, bytes] | None:
    for key, stream in (("stdout", OutputStream.STDOUT), ("stderr", OutputStream.STDERR)):
        data = value.get(key)
        if isinstance(data, str):
            return stream, base64.b64decode(data)
    return None


@attrs.define(eq=False)
class E2BSandbox(StreamedExec):
    """A client for one E2B or Cube sandbox (see the module docstring)."""

    _remote: Remote = attrs.field(repr=False)
    _info: SandboxInfo
    _spec: SandboxSpec
    _max_output_bytes: int
    _alive_until: float = attrs.field(default=0.0, repr=False)
    _envd: Envd = attrs.field(init=False, repr=False)
    _policy: PathPolicy = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._envd = Envd(
            self._remote.data, self._remote.address(self._info), self._remote.provider
        )
        self._policy = PathPolicy(ROOT)

    @property
    def ref(self) -> SandboxRef:
        """``SandboxRef(<provider>, <sandbox id>)``."""
        return SandboxRef(self._remote.provider, self._info.sandbox_id)

    @property
    def root(self) -> str:
        """``/workspace``."""
        return ROOT

    @property
    def spec(self) -> SandboxSpec:
        """The spec this client was created or attached with."""
        return self._spec

    @property
    def _id(self) -> str:
        return self._info.sandbox_id

    def _refresh(self, info: SandboxInfo) -> None:
        # A connect answer carries the current envd token and domain.
        if info.envd_access_token is None:
            info = attrs.evolve(info, envd_access_token=self._info.envd_access_token)
        self._info = info
        self._envd = Envd(self._remote.data, self._remote.address(info), self._remote.provider)

    # ------------------------------------------------------------ keep-alive

    def _mark_alive(self, seconds: float) -> None:
        self._alive_until = time.monotonic() + seconds

    async def keep_alive(self) -> None:
        """Resume the sandbox if it is paused and give it the idle timeout again.

        Raises :class:`SandboxNotFound` if it is gone.
        """
        started = time.monotonic()
        info = await self._remote.control.connect(self._id, timeout=self._remote.idle_timeout)
        self._refresh(info)
        self._alive_until = started + self._remote.idle_timeout

    async def _keep_for(self, seconds: float | None) -> None:
        """Make sure the sandbox is not paused within ``seconds`` (plus a margin) from now."""
        needed = (
            seconds if seconds is not None else self._remote.idle_timeout
        ) + KEEP_MARGIN_SECONDS
        if time.monotonic() + needed <= self._alive_until:
            return
        lifetime = max(self._remote.idle_timeout, needed)
        started = time.monotonic()
        await self._remote.control.set_timeout(self._id, lifetime)
        self._alive_until = started + lifetime

    # ------------------------------------------------------------ data-plane errors

    async def _confirm(self, error: MangoError, *, resume: bool) -> None:
        """After a data-plane failure: gone → SandboxNotFound; paused → resume (if asked).

        Returns only when the sandbox was paused and is running again; otherwise raises
        (``error`` itself when the sandbox is there).
        """
        try:
            info = await self._remote.control.get(self._id)
        except SandboxNotFound as exc:
            raise SandboxNotFound(
                f"{self._remote.provider}: sandbox {self._id!r} no longer exists"
            ) from exc
        if info.state == SandboxState.PAUSED and resume:
            await self.keep_alive()
            return
        raise error

    @staticmethod
    def _unreachable(error: MangoError) -> bool:
        # A 502 is the proxy's word for "no such sandbox here" (gone or paused).
        return isinstance(error, RemoteUnavailable) and error.status == 502

    async def _torn_down(self) -> bool:
        """True if the control plane shows this sandbox gone or being killed: a destroy elsewhere.

        Asked only after a command ended the way a teardown ends one. A
        sandbox still shown running or paused is asked again for a while
        (:func:`~mango.provider.execution.torn_down`) before the end is
        taken as the command's own.
        """

        async def gone() -> bool:
            # A 404 (SandboxNotFound) answers True in the kit.
            return (await self._remote.control.get(self._id)).state in SandboxState.GONE

        return await torn_down(gone, settle=TEARDOWN_SETTLE_SECONDS)

    async def _data_call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except RemoteUnavailable as exc:
            if not self._unreachable(exc):
                raise
            await self._confirm(exc, resume=True)
        return await call()

    # ------------------------------------------------------------ exec

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._remote.tracker.track(self._id) as handle:
            await self._keep_for(timeout)
            stdin = command.stdin
            rpc_stdin = bool(stdin) and _version(self._info.envd_version) >= _CLOSE_STDIN_SINCE
            if stdin and not rpc_stdin:
                plan = plan_command(
                    command.argv,
                    stdin=stdin,
                    root=ROOT,
                    cwd=command.cwd,
                    env=command.env,
                    staging_dir="/tmp",  # noqa: S108 - never used: staged plans are refused below
                    new_session=True,
                )
                if plan.stdin.staged:
                    raise InvalidInput(
                        f"this sandbox's envd ({self._info.envd_version}) cannot close stdin; "
                        f"stdin over about {MAX_INLINE_LINE_BYTES * 3 // 4} bytes needs envd "
                        "0.5.2 or later (rebuild the template)"
                    )
                line = plan.line
            else:
                # envd starts the shell in ROOT already: a cd is needed only below it.
                line = command_line(
                    command.argv,
                    root=ROOT if command.cwd else None,
                    cwd=command.cwd,
                    env=command.env,
                    new_session=True,
                )
            run = _Run(self, channel, timeout, stdin if rpc_stdin else b"", handle.destroyed)
            opened = False
            for attempt in range(2):
                try:
                    async with self._envd.start(
                        cmd=SHELL,
                        args=["-l", "-c", line],
                        cwd=ROOT,
                        stdin=rpc_stdin,
                        tag=run.tag,
                        timeout_ms=None
                        if timeout is None
                        else int((timeout + SERVER_GRACE_SECONDS) * 1000),
                    ) as envelopes:
                        opened = True
                        return await run.consume(envelopes, lambda: handle.destroyed)
                except RemoteUnavailable as exc:
                    if handle.destroyed:
                        return channel.result(exit_code=-1, cancelled=True)
                    if not (self._unreachable(exc) or (opened and exc.status is None)):
                        raise
                    await self._confirm(exc, resume=not opened and attempt == 0)
            raise AssertionError("unreachable: the second start either returned or raised")

    async def _kill_tree(self, pid: int | None, tag: str) -> None:
        """Kill the command's process group (bounded; never raises)."""

        async def attempt() -> None:
            target = pid if pid is not None else await self._envd.pid_of(tag)
            if target is None:
                return
            try:
                async with self._envd.start(
                    cmd="/bin/sh",
                    args=["-c", kill_tree_line(target)],
                    cwd="/",
                    stdin=False,
                    tag=f"{tag}-kill",
                    timeout_ms=int(KILL_SECONDS * 1000),
                ) as envelopes:
                    async for envelope in envelopes:
                        if _event(envelope)[0] == "end":
                            return
            except MangoError:
                await self._envd.kill(target)

        with contextlib.suppress(Exception, TimeoutError):
            await asyncio.wait_for(asyncio.shield(attempt()), KILL_SECONDS)

    # ------------------------------------------------------------ files

    async def _stat(self, path: str) -> Entry | None:
        return await self._data_call(lambda: self._envd.stat(path))

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return a regular file of at most ``max_bytes`` (default: the provider's read cap).

        The size is checked first and the download stops past the bound:
        memory stays O(bound). :class:`FileTooLarge` past it.
        """
        limit = read_limit(max_bytes, self._remote.max_read_bytes)
        resolved = await self._policy.resolve_read(path, self._stat)
        size = resolved.entry.size if resolved.entry is not None else 0
        if size > limit:
            raise FileTooLarge(
                f"{path!r} is {size} bytes, over the read bound of {limit}",
                size=size,
                limit=limit,
                hint="stream it with open_file",
            )
        data = bytearray()
        async with self._download(resolved.path, path) as chunks:
            async for chunk in chunks:
                data += chunk
                if len(data) > limit:
                    raise FileTooLarge(
                        f"{path!r} grew past the read bound of {limit} bytes",
                        size=len(data),
                        limit=limit,
                        hint="stream it with open_file",
                    )
        return bytes(data)

    @contextlib.asynccontextmanager
    async def _download(self, absolute: str, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        async def opened() -> _Entered:
            manager = self._envd.download(absolute)
            response = await manager.__aenter__()
            return _Entered(manager, response)

        entered = await self._data_call(opened)
        try:
            if entered.response.status_code == 404:
                raise file_not_found(path)
            yield entered.response.aiter_bytes()
        finally:
            await entered.manager.__aexit__(None, None, None)

    @contextlib.asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a regular file's bytes, whatever its size (memory O(chunk))."""
        resolved = await self._policy.resolve_read(path, self._stat)
        async with self._download(resolved.path, path) as chunks:
            yield chunks

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path`` with ``data``, creating parent directories."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"write_file takes bytes, got {type(data).__name__}")
        resolved = await self._policy.resolve_write(path, self._stat)
        if resolved.missing_dirs:
            # MakeDir creates every missing parent of the deepest one.
            deepest = resolved.missing_dirs[-1]
            await self._data_call(lambda: self._envd.make_dir(deepest))
        payload = bytes(data)
        await self._data_call(lambda: self._envd.upload(resolved.path, payload))

    # ------------------------------------------------------------ destroy

    async def destroy(self) -> None:
        """Kill the sandbox (idempotent); running execs end with ``cancelled=True``."""
        self._remote.tracker.mark_destroyed(self._id)
        await self._remote.control.kill(self._id)
        await self._remote.tracker.terminate(self._id, KILL_SECONDS)


@attrs.define
class _Entered:
    manager: Any
    response: Any


@attrs.define(eq=False)
class _Run:
    """The state of one exec while its stream is read."""

    sandbox: E2BSandbox
    channel: ExecChannel
    timeout: float | None
    stdin: bytes
    destroyed_at_start: bool
    tag: str = attrs.field(factory=lambda: f"mango-{secrets.token_hex(8)}")
    pid: int | None = None
    feeder: asyncio.Task[None] | None = None
    feed_error: BaseException | None = None

    async def _feed(self, pid: int) -> None:
        envd = self.sandbox._envd
        view = memoryview(self.stdin)
        try:
            for offset in range(0, len(view), STDIN_CHUNK_BYTES):
                if not await envd.send_input(pid, bytes(view[offset : offset + STDIN_CHUNK_BYTES])):
                    return  # the process ended; it did not want the rest
            await envd.close_stdin(pid)
        except Exception as exc:  # noqa: BLE001 - judged when the stream ends
            self.feed_error = exc

    async def _read(
        self, envelopes: AsyncIterator[Envelope], *, until: float | None
    ) -> tuple[int | None, bool]:
        """Feed the channel until ``end``; return (exit code or None, server timed out)."""
        async with asyncio.timeout_at(until):
            async for envelope in envelopes:
                kind, value = _event(envelope)
                if kind == "data":
                    chunk = _chunk(value)
                    if chunk is not None:
                        await self.channel.send(*chunk)
                elif kind == "start":
                    pid = value.get("pid")
                    if isinstance(pid, int) and self.pid is None:
                        self.pid = pid
                        if self.stdin:
                            self.feeder = asyncio.ensure_future(self._feed(pid))
                elif kind == "end":
                    return exit_code_of(value), False
                elif envelope.end:
                    error = envelope.error
                    if error is not None and error.code == "deadline_exceeded":
                        return None, True
                    if error is not None:
                        raise RemoteUnavailable(
                            f"{self.sandbox._remote.provider}: envd ended the stream: "
                            f"{error.code} {error.message[:200]}".rstrip()
                        )
                    break
        raise RemoteUnavailable(
            f"{self.sandbox._remote.provider}: the process stream ended without an end event"
        )

    async def _torn_down_or_killed(self, destroyed: Callable[[], bool]) -> bool:
        """After a cut or failed stream: True if the sandbox was torn down.

        Otherwise the sandbox is there and the command may still run, unseen:
        its tree is killed (also when we are cancelled while asking) and the
        caller's error stands.
        """
        gone = False
        try:
            gone = destroyed() or await self.sandbox._torn_down()
        finally:
            if not gone:
                self.channel.release_window()
                await self.sandbox._kill_tree(self.pid, self.tag)
        return gone

    async def consume(
        self, envelopes: AsyncIterator[Envelope], destroyed: Callable[[], bool]
    ) -> ExecResult:
        """Read the stream to its end; kill the tree on timeout or cancellation."""
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        try:
            try:
                code, server_timeout = await self._read(envelopes, until=deadline)
            except TimeoutError:
                if deadline is None or loop.time() < deadline:
                    raise
                code, server_timeout = None, True
            if server_timeout:
                self.channel.release_window()
                await self.sandbox._kill_tree(self.pid, self.tag)
                with contextlib.suppress(MangoError, TimeoutError):
                    await self._read(envelopes, until=loop.time() + DRAIN_SECONDS)
                return self.channel.result(exit_code=-1, timed_out=True)
        except RemoteUnavailable:
            # The stream was cut or failed: how a sandbox's teardown ends it.
            if await self._torn_down_or_killed(destroyed):
                return self.channel.result(exit_code=-1, cancelled=True)
            raise
        except BaseException:
            # Cancelled (or the consumer left): the whole tree dies before we re-raise.
            self.channel.release_window()
            await self.sandbox._kill_tree(self.pid, self.tag)
            raise
        finally:
            if self.feeder is not None and not self.feeder.done():
                self.feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.feeder
        if destroyed() or (code == _EXIT_KILLED and await self.sandbox._torn_down()):
            return self.channel.result(exit_code=-1, cancelled=True)
        error = self.feed_error
        if isinstance(error, ProviderUnavailable) and getattr(error, "status", None) != 500:
            # The command got only part of its stdin: its result cannot stand.
            raise error
        return self.channel.result(exit_code=code if code is not None else -1)
