"""One command in an E2B (or Cube) sandbox: envd's process stream, read as it arrives.

Exec is envd's ``process.Process/Start`` server stream: each ``data`` event
goes to the kit's :class:`~mango.provider.output.ExecChannel` (capped at the
source; bytes past the cap are drained and dropped, so memory stays O(cap)
whatever the command prints). The command is one shell line
(:mod:`mango.provider.shell`) run by ``/bin/bash -l -c`` as envd's clients
do, in a new session (``setsid``) so that a timeout, a cancellation or
leaving the stream kills its whole process tree: envd only ever signals the
pid it started and never kills a command whose stream was closed, so the
sandbox runs ``kill -KILL -- -<pid>`` itself. Stdin travels through
``SendInput`` in chunks, then ``CloseStdin`` (any size).

A start that meets an unreachable sandbox (the proxy's 502) asks the control
plane once: a paused sandbox is resumed and the start repeated (it never
reached envd), a gone one is :class:`~mango.provider.SandboxNotFound`.

A command ends with ``cancelled=True`` (exit code -1) when its sandbox is
destroyed while it runs: by this client (:attr:`ExecHandle.destroyed`), or
elsewhere (another worker, ``mango sessions delete``). E2B kills the
sandbox's VM with envd inside, so the command's stream is cut; a command
killed by SIGKILL (137) or whose stream was cut or failed makes the client
ask the control plane whether the sandbox is gone (the provider view's
:meth:`~mango.provider.remote.ProviderView.torn_down`). Any other end costs
no control-plane call.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import attrs

from mango.provider import (
    Command,
    ExecResult,
    InvalidInput,
    MangoError,
    OutputStream,
    ProviderUnavailable,
)
from mango.provider.execution import ExecHandle
from mango.provider.http import RemoteUnavailable
from mango.provider.output import ExecChannel
from mango.provider.shell import MAX_INLINE_LINE_BYTES, command_line, kill_tree_line, plan_command
from mango.provider.tasks import cancel_and_settle
from mango_provider_e2b.connect import Envelope
from mango_provider_e2b.control import SandboxInfo
from mango_provider_e2b.envd import CLOSE_STDIN_SINCE, Envd, at_least, exit_code_of
from mango_provider_e2b.remote import Remote

__all__ = [
    "DRAIN_SECONDS",
    "FINISH_SECONDS",
    "KILL_SECONDS",
    "ROOT",
    "SERVER_GRACE_SECONDS",
    "SHELL",
    "STDIN_CHUNK_BYTES",
    "CommandHost",
    "event_of",
    "kill_tree",
    "run_command",
    "unreachable",
]

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
FINISH_SECONDS = 0.5
"""How long the end of a stream is awaited after its ``end`` event (see :func:`finish`)."""
_EXIT_KILLED = 128 + signal.SIGKILL
"""A command killed by SIGKILL: its own doing (``kill -9``, OOM) or its sandbox's teardown."""


class CommandHost(Protocol):
    """The sandbox a command runs in, as the command sees it (an ``E2BSandbox``)."""

    @property
    def _envd(self) -> Envd:
        """Its envd client now (a resume replaces it)."""

    @property
    def _info(self) -> SandboxInfo:
        """Its sandbox record (envd's version)."""

    @property
    def _provider(self) -> Remote:
        """Its provider view."""

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""

    async def _confirm(self, error: MangoError, *, resume: bool) -> None:
        """After a data-plane failure: return once a paused sandbox runs again, else raise."""


def unreachable(error: MangoError) -> bool:
    """A 502: the proxy's word for "no such sandbox here" (gone or paused)."""
    return isinstance(error, RemoteUnavailable) and error.status == 502


def event_of(envelope: Envelope) -> tuple[str, dict[str, Any]]:
    """The kind of a process-stream event (``start``, ``data``, ``end``, ...) and its body."""
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


def _line(command: Command, envd_version: str | None) -> tuple[str, bool]:
    """The shell line of ``command``, and whether its stdin travels through ``SendInput``."""
    stdin = command.stdin
    rpc_stdin = bool(stdin) and at_least(envd_version, CLOSE_STDIN_SINCE)
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
                f"this sandbox's envd ({envd_version}) cannot close stdin; "
                f"stdin over about {MAX_INLINE_LINE_BYTES * 3 // 4} bytes needs envd "
                "0.5.2 or later (rebuild the template)"
            )
        return plan.line, False
    # envd starts the shell in ROOT already: a cd is needed only below it.
    line = command_line(
        command.argv,
        root=ROOT if command.cwd else None,
        cwd=command.cwd,
        env=command.env,
        new_session=True,
    )
    return line, rpc_stdin


async def run_command(
    sandbox: CommandHost,
    command: Command,
    channel: ExecChannel,
    timeout: float | None,
    handle: ExecHandle,
) -> ExecResult:
    """Run ``command`` in ``sandbox``, feeding ``channel`` (see the module docstring)."""
    line, rpc_stdin = _line(command, sandbox._envd.version)
    run = _Run(sandbox, channel, timeout, command.stdin if rpc_stdin else b"")
    run.pauses_seen = sandbox._provider.pauses.get(sandbox.sandbox_id, 0)
    server_ms = None if timeout is None else int((timeout + SERVER_GRACE_SECONDS) * 1000)
    opened = False
    for attempt in range(2):
        try:
            async with sandbox._envd.start(
                cmd=SHELL,
                args=["-l", "-c", line],
                cwd=ROOT,
                stdin=rpc_stdin,
                tag=run.tag,
                timeout_ms=server_ms,
            ) as envelopes:
                opened = True
                return await run.consume_unless_destroyed(envelopes, handle)
        except RemoteUnavailable as exc:
            if handle.destroyed:
                return channel.result(exit_code=-1, cancelled=True)
            if not (unreachable(exc) or (opened and exc.status is None)):
                raise
            await sandbox._confirm(exc, resume=not opened and attempt == 0)
    raise AssertionError("unreachable: the second start either returned or raised")


async def finish(envelopes: AsyncIterator[Envelope]) -> None:
    """Read a process stream past its ``end`` event to its end-of-stream message (bounded).

    envd closes the stream right after ``end`` (its ``Start`` handler returns
    once the end event is sent: ``packages/envd/internal/services/process/
    start.go`` in e2b-dev/infra); reading that close lets the
    HTTP connection go back to the pool. Left unread, closing the response
    drops the connection and the next command opens a new one (a connect,
    a resolver call, and a TLS handshake against a real sandbox). The
    result is already known: a stream that does not end within
    :data:`FINISH_SECONDS`, or that fails, is closed as before.
    """
    with contextlib.suppress(MangoError, TimeoutError):
        async with asyncio.timeout(FINISH_SECONDS):
            async for _ in envelopes:
                pass


async def kill_tree(envd: Envd, pid: int | None, tag: str) -> None:
    """Kill the process group of the command started with ``tag`` (bounded; never raises)."""

    async def attempt() -> None:
        target = pid if pid is not None else await envd.pid_of(tag)
        if target is None:
            return
        try:
            async with envd.start(
                cmd="/bin/sh",
                args=["-c", kill_tree_line(target)],
                cwd="/",
                stdin=False,
                tag=f"{tag}-kill",
                timeout_ms=int(KILL_SECONDS * 1000),
            ) as envelopes:
                async for envelope in envelopes:
                    if event_of(envelope)[0] == "end":
                        await finish(envelopes)
                        return
        except MangoError:
            await envd.kill(target)

    with contextlib.suppress(Exception, TimeoutError):
        await asyncio.wait_for(asyncio.shield(attempt()), KILL_SECONDS)


@attrs.define(eq=False)
class _Run:
    """The state of one exec while its stream is read."""

    sandbox: CommandHost
    channel: ExecChannel
    timeout: float | None
    stdin: bytes
    tag: str = attrs.field(factory=lambda: f"mango-{secrets.token_hex(8)}")
    pid: int | None = None
    pauses_seen: int = 0
    """The provider instance's pause count of the sandbox when the command started."""
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

    async def _kill(self) -> None:
        self.channel.release_window()
        await kill_tree(self.sandbox._envd, self.pid, self.tag)

    async def _torn_down(self) -> bool:
        """True if the control plane shows the sandbox gone or being killed: a destroy elsewhere.

        A sandbox still shown running or paused is asked again for a while
        (:func:`~mango.provider.execution.torn_down`) before the end is
        taken as the command's own.
        """
        return await self.sandbox._provider.torn_down(self.sandbox.sandbox_id)

    async def _read(
        self, envelopes: AsyncIterator[Envelope], *, until: float | None
    ) -> tuple[int | None, bool]:
        """Feed the channel until ``end``; return (exit code or None, server timed out)."""
        async with asyncio.timeout_at(until):
            async for envelope in envelopes:
                kind, value = event_of(envelope)
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
                    await finish(envelopes)
                    return exit_code_of(value), False
                elif envelope.end:
                    error = envelope.error
                    if error is not None and error.code == "deadline_exceeded":
                        return None, True
                    if error is not None:
                        raise RemoteUnavailable(
                            f"{self.sandbox._provider.name}: envd ended the stream: "
                            f"{error.code} {error.message[:200]}".rstrip()
                        )
                    break
        raise RemoteUnavailable(
            f"{self.sandbox._provider.name}: the process stream ended without an end event"
        )

    async def _read_across_pauses(
        self, envelopes: AsyncIterator[Envelope], *, until: float | None
    ) -> tuple[int | None, bool]:
        """:meth:`_read`, taking the stream up (envd's ``Connect``) after each pause.

        A pause stops the sandbox's VM and cuts the stream; the process is
        frozen with it. Once the sandbox runs again the stream is taken up
        by the command's tag. A process that ended between the resume and
        the take-up cannot be followed (envd keeps no exit status for it):
        that is an error, not a guess. A cut that no pause explains is the
        caller's to judge, as before.
        """
        sandbox_id = self.sandbox.sandbox_id
        async with contextlib.AsyncExitStack() as streams:
            while True:
                try:
                    return await self._read(envelopes, until=until)
                except RemoteUnavailable as exc:
                    if self.pid is None or exc.status is not None:
                        raise
                    try:
                        taken_up = await self.sandbox._provider.wait_for_resume(
                            sandbox_id, until, pauses_seen=self.pauses_seen
                        )
                    except MangoError:
                        raise exc from None  # gone, or the control plane unsure: as before
                    if taken_up is None:
                        raise
                    try:
                        envelopes = await streams.enter_async_context(
                            self.sandbox._envd.connect(self.tag)
                        )
                    finally:
                        if not taken_up.done():
                            taken_up.set_result(None)
                    self.pauses_seen = self.sandbox._provider.pauses.get(sandbox_id, 0)

    async def _torn_down_or_killed(self, destroyed: Callable[[], bool]) -> bool:
        """After a cut or failed stream: True if the sandbox was torn down.

        Otherwise the sandbox is there and the command may still run, unseen:
        its tree is killed (also when we are cancelled while asking) and the
        caller's error stands.
        """
        gone = False
        try:
            gone = destroyed() or await self._torn_down()
        finally:
            if not gone:
                await self._kill()
        return gone

    async def consume_unless_destroyed(
        self, envelopes: AsyncIterator[Envelope], handle: ExecHandle
    ) -> ExecResult:
        """:meth:`consume`, or ``cancelled=True`` as soon as this client destroys the sandbox.

        E2B kills the sandbox's VM, but whether the stream is reset then or
        only when a keep-alive notices is the network's affair: this client's
        own destroy does not wait for it.
        """
        reading = asyncio.ensure_future(self.consume(envelopes, lambda: handle.destroyed))
        destroyed = asyncio.ensure_future(handle.kill_requested.wait())
        try:
            await asyncio.wait({reading, destroyed}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await cancel_and_settle(reading)
            raise
        finally:
            destroyed.cancel()
        if not reading.done():
            await cancel_and_settle(reading)
            return self.channel.result(exit_code=-1, cancelled=True)
        return reading.result()

    async def consume(
        self, envelopes: AsyncIterator[Envelope], destroyed: Callable[[], bool]
    ) -> ExecResult:
        """Read the stream to its end; kill the tree on timeout or cancellation."""
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        try:
            try:
                code, server_timeout = await self._read_across_pauses(envelopes, until=deadline)
            except TimeoutError:
                if deadline is None or loop.time() < deadline:
                    raise
                code, server_timeout = None, True
            if server_timeout:
                await self._kill()
                with contextlib.suppress(MangoError, TimeoutError):
                    await self._read(envelopes, until=loop.time() + DRAIN_SECONDS)
                return self.channel.result(exit_code=-1, timed_out=True)
        except RemoteUnavailable:
            # The stream was cut or failed: how a sandbox's teardown ends it.
            if await self._torn_down_or_killed(destroyed):
                return self.channel.result(exit_code=-1, cancelled=True)
            raise
        except BaseException:
            # Cancelled (or the consumer left): the whole tree dies before we re-raise,
            # unless this client destroyed the sandbox (nothing is left to kill).
            if not destroyed():
                await self._kill()
            raise
        finally:
            if self.feeder is not None and not self.feeder.done():
                self.feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.feeder
        if destroyed() or (code == _EXIT_KILLED and await self._torn_down()):
            return self.channel.result(exit_code=-1, cancelled=True)
        error = self.feed_error
        if isinstance(error, ProviderUnavailable) and getattr(error, "status", None) != 500:
            # The command got only part of its stdin: its result cannot stand.
            raise error
        return self.channel.result(exit_code=code if code is not None else -1)
