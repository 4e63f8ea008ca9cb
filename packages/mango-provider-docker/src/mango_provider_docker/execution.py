"""One command in a container: attach stream, capped output, timeout and cancellation.

A command runs through the Engine's exec API (``POST /containers/{id}/exec``,
then ``POST /exec/{id}/start`` hijacked, no TTY), wrapped by
:data:`~mango_provider_docker.scripts.EXEC_WRAPPER`, which reports the
command's pid inside the container before ``exec``-ing it. Stdout and stderr
arrive multiplexed on one stream; stdin, when given, is written on the same
connection and then its write side is closed so that the command sees
end-of-file. The exit code comes from ``GET /exec/{id}/json``, polled until
the exec is no longer running (the stream can end first).

A command may exit without reading all of its stdin. The Engine then keeps
the stream open, its stdin copy stuck, for a minute or more; so while stdin
is still being written the exec is polled too, and once it has exited the
rest of stdin is dropped, what the command printed is read until the stream
has been quiet for :data:`QUIET_SECONDS` (at most :data:`DRAIN_SECONDS`), and
the connection is closed.

Termination keeps the sandbox usable: only the command's process tree dies.

* **timeout** (``Command.timeout``, else the spec's): a second exec runs
  :data:`~mango_provider_docker.scripts.TREE_KILLER` with the reported pid;
  the stream is then drained (at most :data:`DRAIN_SECONDS`) and the result
  has ``timed_out=True`` and ``exit_code=-1``.
* **cancellation** of the awaiting task: the same kill, in a task that a
  second cancellation cannot interrupt, then :class:`asyncio.CancelledError`
  is re-raised. A task cancelled before the exec was started runs nothing.
  If the cancellation lands while the start request is in flight, the start
  is allowed to settle first, so a command that did start is always found.
* **destroy** of the sandbox while the command runs, in this process or any
  other (``mango sessions delete``): the container is killed and removed,
  the stream ends, and the result has ``cancelled=True`` and
  ``exit_code=-1``. A command that ends by a signal (exit 137, or its exec
  gone with the container) while its container is no longer running or no
  longer exists is reported the same way; one killed inside a running
  container (the OOM killer, ``kill -9``) keeps its 137.

Output goes to the exec's :class:`~mango.provider.output.ExecChannel`: each
stream keeps its first ``cap`` bytes, an exact prefix; later bytes are read
and discarded (aiodocker's flow-controlled queue holds at most a few frames),
so memory stays O(cap) whatever the command prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from aiodocker.execs import Exec

from mango.provider import (
    Command,
    ExecResult,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxNotRunning,
)
from mango.provider.execution import TEARDOWN_SETTLE_SECONDS, ExecHandle, torn_down
from mango.provider.output import ExecChannel
from mango_provider_docker.commands import (
    MAX_COMMAND_BYTES,
    SAFE_PATH,
    SHELL,
    check_command_text,
    exec_env,
    not_started_error,
    wrapper_error,
)
from mango_provider_docker.engine import Engine
from mango_provider_docker.layout import WORKSPACE
from mango_provider_docker.scripts import EXEC_WRAPPER, TREE_KILLER
from mango_provider_docker.streams import OutputPump, close_write_side, write_stdin

__all__ = [
    "DRAIN_SECONDS",
    "MAX_COMMAND_BYTES",
    "QUIET_SECONDS",
    "SAFE_PATH",
    "SETTLE_SECONDS",
    "SHELL",
    "TEARDOWN_SETTLE_SECONDS",
    "ContainerNotRunning",
    "not_started_error",
    "run_command",
]

log = logging.getLogger(__name__)

DRAIN_SECONDS = 5.0
"""After a kill, how long the stream may stay open before it is abandoned."""
QUIET_SECONDS = 0.25
"""After a command exited leaving stdin unread: how long no output may arrive before the
stream the Engine holds open is taken as ended."""
SETTLE_SECONDS = 15.0
"""How long a kill waits for an in-flight start, or for the wrapper's pid line."""
_EXIT_TIMED_OUT = -1
_EXIT_KILLED = 128 + 9


ContainerNotRunning = SandboxNotRunning
"""The container exists but is stopped or paused (retryable); the mango error tree's name."""


class _Run:
    """One started exec: its stream, pump, stdin writer, and the kill path."""

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        execution: Exec,
        channel: ExecChannel,
        background: set[asyncio.Task[Any]],
    ) -> None:
        self._engine = engine
        self._container_id = container_id
        self._execution = execution
        self._background = background
        self._stream = engine.exec_stream(execution)
        self._channel = channel
        self._pump = OutputPump(engine, self._stream, channel)
        self._tasks: list[asyncio.Future[Any]] = []
        self._writer: asyncio.Future[None] | None = None

    @property
    def exec_id(self) -> str:
        """The Engine's id of this exec, for messages."""
        return self._execution.id

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coroutine`` in a task the provider keeps a reference to until it ends."""
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def open(self) -> None:
        """Send the start request (this starts the command)."""
        with self._engine.errors(f"start exec {self.exec_id}"):
            await self._stream.__aenter__()

    def start_io(self, stdin: bytes) -> asyncio.Future[None]:
        """Start reading output (and writing stdin); return the reader."""
        pump = asyncio.ensure_future(self._pump.run())
        self._tasks.append(pump)
        if stdin:
            self._writer = asyncio.ensure_future(write_stdin(self._stream, stdin))
            self._tasks.append(self._writer)
        else:
            close_write_side(self._stream)
        return pump

    async def output_ended(self, pump: asyncio.Future[None]) -> None:
        """Wait until the command's output has ended (``pump`` is never cancelled here).

        While stdin is still being written, the exec is watched as well: once
        the command has exited, stdin left unread is dropped and the stream,
        which the Engine keeps open until its stdin copy ends, is closed as
        soon as no more output arrives (see the module docstring).
        """
        writer = self._writer
        if writer is not None and not writer.done():
            exited = asyncio.ensure_future(self.wait_exited(max_delay=0.25))
            try:
                watched: set[asyncio.Future[Any]] = {pump, writer, exited}
                await asyncio.wait(watched, return_when="FIRST_COMPLETED")
                # A failed poll is not an exit: the output and the later poll decide.
                exited_first = exited.done() and exited.exception() is None
                if exited_first and not pump.done() and not writer.done():
                    await self._abandon_stdin(writer, pump)
                    return
            finally:
                exited.cancel()
                if exited.done() and not exited.cancelled():
                    exited.exception()  # retrieved
        await asyncio.shield(pump)

    async def _abandon_stdin(
        self, writer: asyncio.Future[None], pump: asyncio.Future[None]
    ) -> None:
        """The command exited with stdin unread: drop the rest, read what it printed, close."""
        writer.cancel()
        loop = asyncio.get_running_loop()
        until = loop.time() + DRAIN_SECONDS
        while not pump.done() and loop.time() < until:
            seen = self._pump.frames
            await asyncio.wait({pump}, timeout=QUIET_SECONDS)
            if self._pump.frames == seen:
                break
        log.debug("exec %s exited leaving stdin unread; its stream is closed", self.exec_id)
        await self.close()

    async def wait_exited(self, *, max_delay: float = 0.1) -> dict[str, Any] | None:
        """Poll the exec until it has exited; ``None`` if it is gone with its container.

        An exec the daemon has not started yet reads as not running with no
        exit code: the Engine answers the start request (101) *before* it
        starts the process, so right after :meth:`open` the exec can look like
        that for a moment (longer on a loaded machine). That is not an exit:
        taken for one, the stream was closed under a command that had yet to
        run, and the daemon reported it as 126 with no output. An exec that
        never gets an exit code (its start failed in a way the daemon did not
        record) is returned as it is after :data:`SETTLE_SECONDS`.
        """
        loop = asyncio.get_running_loop()
        settle_until = loop.time() + SETTLE_SECONDS
        delay = 0.002
        while True:
            info = await self._engine.exec_inspect(self._execution)
            if info is None:
                return None
            if not info.get("Running") and (
                info.get("ExitCode") is not None or loop.time() >= settle_until
            ):
                return info
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)

    async def kill_tree(self, pump: asyncio.Future[None]) -> None:
        """Kill the command's process tree, then let the stream drain (bounded)."""
        # What the command printed before dying is read now, not held back by a slow reader.
        self._channel.release_window()
        if not self._pump.status_seen.is_set():
            status = asyncio.ensure_future(self._pump.status_seen.wait())
            waiters: set[asyncio.Future[Any]] = {status, pump}
            await asyncio.wait(waiters, timeout=SETTLE_SECONDS, return_when="FIRST_COMPLETED")
            status.cancel()
        pid = self._pump.pid
        if pid is None:
            if not pump.done():
                log.warning("exec %s never reported its pid; it may still be running", self.exec_id)
        else:
            try:
                killer = await self._engine.exec_create(
                    self._container_id,
                    [SHELL, "-c", TREE_KILLER, "mango-kill", str(pid)],
                    env=[f"PATH={SAFE_PATH}"],
                    stdin=False,
                    workdir="/",
                )
                if killer is not None:
                    await self._engine.exec_start_detached(killer)
            except (SandboxNotFound, ProviderUnavailable) as exc:
                log.warning("could not kill the process tree of exec %s: %s", self.exec_id, exc)
        await asyncio.wait({pump}, timeout=DRAIN_SECONDS)

    async def close(self) -> None:
        """Stop the reader and writer and close the connection; idempotent."""
        with contextlib.suppress(Exception):
            await self._stream.close()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
            for task in self._tasks:
                if not task.cancelled():
                    task.exception()  # retrieved: a reader error after a kill is expected

    def result(
        self, *, exit_code: int, timed_out: bool = False, cancelled: bool = False
    ) -> ExecResult:
        """The final :class:`ExecResult` (flags from what was read so far)."""
        return self._channel.result(exit_code=exit_code, timed_out=timed_out, cancelled=cancelled)

    async def finished(self, info: dict[str, Any] | None, *, destroyed: bool) -> ExecResult:
        """The result of a command that ran to its end (``info``: the exec inspect)."""
        if self._pump.error is not None:
            raise wrapper_error(self._pump.error)
        exit_code = None if info is None else info.get("ExitCode")
        if destroyed or (
            (info is None or exit_code == _EXIT_KILLED) and await self._container_torn_down()
        ):
            return self.result(exit_code=-1, cancelled=True)
        if info is None:
            raise SandboxNotFound(f"container {self._container_id} disappeared while a command ran")
        if not self._pump.started:
            raise not_started_error(self._container_id, bytes(self._pump.failure))
        return self.result(exit_code=exit_code if isinstance(exit_code, int) else -1)

    async def _container_torn_down(self) -> bool:
        """True if the container is gone, being removed or stopped: a destroy, maybe elsewhere.

        The daemon may report the exec's exit a moment before the container's,
        so the kit's :func:`~mango.provider.execution.torn_down` asks again
        for a while before the 137 is taken as the command's own.
        """

        async def gone() -> bool:
            inspect = await self._engine.inspect_container(self._container_id)
            state = (inspect or {}).get("State") or {}
            return inspect is None or state.get("Status") == "removing" or not state.get("Running")

        return await torn_down(gone, settle=TEARDOWN_SETTLE_SECONDS)


async def _settled(opening: asyncio.Future[None]) -> bool:
    """Wait (bounded) for an in-flight start request; True if the command was started."""
    await asyncio.wait({opening}, timeout=SETTLE_SECONDS)
    if not opening.done():
        opening.cancel()
        log.warning("an exec start request did not settle in %ss", SETTLE_SECONDS)
        return False
    return not opening.cancelled() and opening.exception() is None


async def _terminate(
    run: _Run, opening: asyncio.Future[None], pump: asyncio.Future[None] | None
) -> None:
    """Kill whatever the exec started, drain, then close. Never raises."""
    try:
        if pump is None:
            if not await _settled(opening):
                return
            pump = run.start_io(b"")
        await run.kill_tree(pump)
    except Exception as exc:  # noqa: BLE001 - termination reports, it never raises
        log.warning("terminating exec %s failed: %s", run.exec_id, exc)
    finally:
        await run.close()


async def _supervise(
    run: _Run, stdin: bytes, deadline: float | None, handle: ExecHandle
) -> ExecResult:
    """Start the command and wait for it, killing its tree on timeout or cancellation."""
    opening = asyncio.ensure_future(run.open())
    pump: asyncio.Future[None] | None = None
    handed_off = False
    try:
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(opening)
            pump = run.start_io(stdin)
            async with asyncio.timeout_at(deadline):
                await run.output_ended(pump)
                info = await run.wait_exited()
        except (TimeoutError, asyncio.CancelledError) as exc:
            handed_off = True
            termination = run.spawn(_terminate(run, opening, pump))
            # A (further) cancellation stops this wait, never the termination.
            await asyncio.shield(termination)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return run.result(exit_code=_EXIT_TIMED_OUT, timed_out=True, cancelled=handle.destroyed)
        except SandboxNotFound:
            if handle.destroyed:
                return run.result(exit_code=-1, cancelled=True)
            raise
        return await run.finished(info, destroyed=handle.destroyed)
    finally:
        if not handed_off:
            if not opening.done():
                opening.cancel()
            await run.close()


async def run_command(
    engine: Engine,
    container_id: str,
    command: Command,
    *,
    timeout: float | None,
    channel: ExecChannel,
    handle: ExecHandle,
    background: set[asyncio.Task[Any]],
) -> ExecResult:
    """Run ``command`` in the container, feeding ``channel`` (see the module docstring).

    Returns the final result (exit code and flags, no output bytes).

    Raises :class:`InvalidInput` if an argument or environment value is not
    UTF-8 or they are too large to start (checked before anything is sent, and
    again by what the runtime answers), :class:`ContainerNotRunning` if the
    container is stopped or paused,
    :class:`SandboxNotFound` if it is gone (unless destroy removed it while
    the command ran: then the result is ``cancelled``), :class:`PathEscapeError`
    if the working directory goes through a symlink.
    """
    check_command_text(command)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    # $0 is "sh" so that the shell's own messages (127: "not found") read as usual.
    argv: Sequence[str] = [SHELL, "-c", EXEC_WRAPPER, "sh", command.cwd, *command.argv]
    try:
        async with asyncio.timeout_at(deadline):
            execution = await engine.exec_create(
                container_id,
                argv,
                env=exec_env(command),
                stdin=bool(command.stdin),
                workdir=WORKSPACE,
            )
    except TimeoutError:
        # Created at most, never started: nothing runs.
        return channel.result(exit_code=_EXIT_TIMED_OUT, timed_out=True)
    except SandboxNotFound:
        if handle.destroyed:
            return channel.result(exit_code=-1, cancelled=True)
        raise
    if execution is None:
        raise ContainerNotRunning(f"container {container_id} is not running")
    run = _Run(engine, container_id, execution, channel, background)
    return await _supervise(run, command.stdin, deadline, handle)
