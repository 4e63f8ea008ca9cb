"""One command as a local process group: timeout, cancellation, capped output.

The command runs in its own session (``start_new_session=True``), so its
process group id is its pid and one ``killpg`` reaches every child it started
(unless a child deliberately left the group, see below).

Termination:

* **timeout**: ``SIGTERM`` to the group, up to :data:`TERM_GRACE_SECONDS` for
  the leader to exit, then ``SIGKILL`` to the group regardless (children that
  ignore ``SIGTERM`` die too). The result has ``timed_out=True``.
* **cancellation** of the awaiting task and **destroy** of the sandbox:
  ``SIGKILL`` to the group at once, synchronously, before anything else is
  awaited; cancellation then re-raises :class:`asyncio.CancelledError`. A
  cancellation that lands while the command is being started lets the start
  settle first, then kills the group (see :func:`_kill_once_spawned`).

After a kill the leader is reaped (bounded by :data:`REAP_TIMEOUT_SECONDS`) and
the pipes get :data:`PIPE_DRAIN_SECONDS` to reach end-of-file: a grandchild
that escaped the group (``setsid``) and still holds them cannot stall the
caller. Without a kill, a command is finished when its leader has exited and
both pipes reached end-of-file (as with ``subprocess.run``); a timeout bounds that.

Output: each pipe is read on the event loop in chunks and fed to the exec's
:class:`~mango.provider.output.ExecChannel`, which keeps an exact prefix of at
most the cap per stream and drops the rest (no marker text is appended). While
the channel's queue is full (a slow streaming consumer) the pipe is not read,
so the command waits instead of memory growing; past the cap nothing is
queued, so the pipe drains and the child never blocks on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from mango.provider import ExecResult, InvalidInput, OutputStream
from mango.provider.execution import ExecHandle
from mango.provider.output import ExecChannel

__all__ = [
    "PIPE_DRAIN_SECONDS",
    "REAP_TIMEOUT_SECONDS",
    "SAFE_PATH",
    "TERM_GRACE_SECONDS",
    "kill_group",
    "run_command",
]

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of every command; the worker's own environment is never inherited."""
TERM_GRACE_SECONDS = 0.5
"""After a timeout, how long the leader may take to exit on ``SIGTERM`` before ``SIGKILL``."""
REAP_TIMEOUT_SECONDS = 5.0
"""After ``SIGKILL``, how long to wait for the leader to be reaped."""
PIPE_DRAIN_SECONDS = 1.0
"""After a kill, how long the pipes may stay open before they are abandoned."""

_CHUNK = 256 * 1024
_SELF_FD = "/proc/self/fd"
_fd_dirs: dict[int, str | None] = {}
"""Per process id, where its children find its descriptors (see :func:`_fd_dir`)."""

_Outcome = Literal["finished", "timed_out", "destroyed"]


def kill_group(pgid: int, signo: signal.Signals) -> None:
    """Send ``signo`` to the process group ``pgid``; a group that is gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signo)


class _PipeReader:
    """Reads one pipe on the event loop into the channel; pauses while its queue is full."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        channel: ExecChannel,
        stream: OutputStream,
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._channel = channel
        self._stream = stream
        self._open = True
        self._reading = True
        self.eof: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self._channel.feed(self._stream, chunk)
        if not self._channel.has_room:
            self._reading = False
            self._loop.remove_reader(self._fd)
            self._channel.call_when_room(self._resume)

    def _resume(self) -> None:
        if self._open and not self._reading:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def read_freely(self) -> None:
        """After a kill: no more backpressure, read what is left (the cap still applies)."""
        self._channel.release_window()

    def close(self) -> None:
        """Stop reading and close the pipe; idempotent."""
        if self._open:
            self._open = False
            if self._reading:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
        if not self.eof.done():
            self.eof.set_result(None)


class _StdinWriter:
    """Feeds bytes into a pipe on the event loop, then closes it (end-of-file)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
        self._loop = loop
        self._fd = fd
        self._open = True
        self._pending = memoryview(data)
        os.set_blocking(fd, False)
        loop.add_writer(fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            written = os.write(self._fd, self._pending[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:
            # EPIPE: the command closed its stdin or exited; the rest is not wanted.
            self.close()
            return
        self._pending = self._pending[written:]
        if not self._pending:
            self.close()

    def close(self) -> None:
        """Stop writing and close the pipe; idempotent."""
        if self._open:
            self._open = False
            self._loop.remove_writer(self._fd)
            os.close(self._fd)
            self._pending = memoryview(b"")


def _exit_code(returncode: int | None) -> int:
    if returncode is None:
        return -1
    # asyncio reports death by signal N as -N; shells report 128 + N.
    return 128 - returncode if returncode < 0 else returncode


def _spawn_failure(program: str, exc: OSError, channel: ExecChannel) -> ExecResult:
    if exc.errno == errno.E2BIG:
        # Nothing ran: an error, like every other provider's, not a result.
        raise InvalidInput(
            "the command line and environment are too large to start: the kernel refused them "
            "(E2BIG: at most 128 KiB per argument or variable, ARG_MAX in all)"
        )
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        code = 127
        reason = "No such file or directory" if "/" in program else "command not found"
    else:
        code = 126
        reason = exc.strerror or type(exc).__name__
    channel.feed(
        OutputStream.STDERR, f"mango: {program}: {reason}\n".encode("utf-8", "backslashreplace")
    )
    return channel.result(exit_code=code)


async def _reap_and_drain(
    process: asyncio.subprocess.Process, readers: Sequence[_PipeReader]
) -> None:
    for reader in readers:
        reader.read_freely()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), REAP_TIMEOUT_SECONDS)
    await asyncio.wait([reader.eof for reader in readers], timeout=PIPE_DRAIN_SECONDS)


async def _supervise(
    process: asyncio.subprocess.Process,
    readers: Sequence[_PipeReader],
    handle: ExecHandle,
    deadline: float | None,
) -> _Outcome:
    """Wait until the command finishes, times out or is killed by destroy."""
    waiter = asyncio.ensure_future(process.wait())
    killed = asyncio.ensure_future(handle.kill_requested.wait())
    pending: set[asyncio.Future[Any]] = {waiter, *(reader.eof for reader in readers)}
    outcome: _Outcome = "destroyed"
    try:
        try:
            async with asyncio.timeout_at(deadline):
                while pending and not handle.kill_requested.is_set():
                    _, pending = await asyncio.wait(
                        pending | {killed}, return_when=asyncio.FIRST_COMPLETED
                    )
                    pending.discard(killed)
        except TimeoutError:
            outcome = "timed_out"
            kill_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), TERM_GRACE_SECONDS)
        else:
            if not pending:
                return "finished"
        kill_group(process.pid, signal.SIGKILL)
        await _reap_and_drain(process, readers)
    except BaseException:
        # Cancellation (or anything unexpected): the group dies before we unwind.
        kill_group(process.pid, signal.SIGKILL)
        await _reap_and_drain(process, readers)
        raise
    finally:
        waiter.cancel()
        killed.cancel()
    return outcome


def _fd_dir() -> str | None:
    """Where a child of this process reaches the parent's descriptors; None without ``/proc``.

    ``/proc/<this pid>/fd`` when this ``/proc`` belongs to our pid namespace
    (``/proc/self`` names our pid): the parent's pid directory is already in
    the kernel's dentry cache, while a fresh child's ``/proc/self`` costs about
    20 µs per spawn. A child refused access to it (a non-dumpable worker
    without ``CAP_SYS_PTRACE``) switches this process to ``/proc/self/fd``,
    where the child reaches its own inherited copy.
    """
    pid = os.getpid()
    if pid not in _fd_dirs:
        found = None
        with contextlib.suppress(OSError):
            proc_self = Path("/proc/self").readlink()
            found = f"/proc/{pid}/fd" if str(proc_self) == str(pid) else _SELF_FD
        _fd_dirs[pid] = found
    return _fd_dirs[pid]


class _CwdFailed(OSError):
    """The child could not enter its working directory."""


async def _spawn(argv: Sequence[str], cwd_fd: int, **options: Any) -> asyncio.subprocess.Process:
    """Start ``argv`` in the directory ``cwd_fd``, never looking its path up again.

    On Linux the child's ``chdir`` goes through ``<fd dir>/N``, a link to the
    open directory itself (see :func:`_fd_dir`); so a component renamed or
    swapped for a symlink after the walk cannot send the command elsewhere.
    Elsewhere the child calls ``fchdir`` before ``exec``. Raises
    :class:`_CwdFailed` if the directory cannot be entered, the spawn's own
    :class:`OSError` otherwise.
    """
    fd_dir = _fd_dir()
    if fd_dir is None:  # pragma: no cover - not Linux
        options["preexec_fn"] = lambda: os.fchdir(cwd_fd)
        return await asyncio.create_subprocess_exec(*argv, **options)
    cwd = f"{fd_dir}/{cwd_fd}"
    try:
        return await asyncio.create_subprocess_exec(*argv, cwd=cwd, **options)
    except OSError as exc:
        if exc.filename != cwd:
            raise
        if fd_dir == _SELF_FD or exc.errno not in (errno.EACCES, errno.EPERM):
            raise _CwdFailed(exc.errno, exc.strerror, exc.filename) from exc
    # Refused the parent's descriptors: nothing started, so try again through the child's own.
    _fd_dirs[os.getpid()] = _SELF_FD
    return await _spawn(argv, cwd_fd, **options)


async def _start(argv: Sequence[str], cwd_fd: int, **options: Any) -> asyncio.subprocess.Process:
    """:func:`_spawn`, shielded: cancelled while it settles, what it started dies."""
    spawning = asyncio.ensure_future(_spawn(argv, cwd_fd, **options))
    try:
        return await asyncio.shield(spawning)
    except asyncio.CancelledError:
        await _kill_once_spawned(spawning)
        raise


async def _kill_once_spawned(spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """A cancellation that lands while a command starts: the start settles, its group dies.

    The fork happens at once, but ``create_subprocess_exec`` returns only after
    a few turns of the event loop; a command can run (and fork children) in
    between. Cancelled there, asyncio's own clean-up kills the leader alone,
    and its children outlived the cancellation (a starved CI machine showed
    it). So the start is shielded and, on cancellation, awaited here: a
    command that did start is killed with its process group and reaped
    (bounded by :data:`REAP_TIMEOUT_SECONDS`). A further cancellation waits for this
    too; the pipes' ends are closed only afterwards, never under a spawn in
    flight.
    """

    async def settle() -> None:
        try:
            process = await spawning
        except BaseException:  # noqa: BLE001 - nothing started: nothing to kill
            return
        kill_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), REAP_TIMEOUT_SECONDS)

    settling = asyncio.ensure_future(settle())
    while not settling.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(settling)


def _above_stdio(fd: int) -> int | None:
    """A duplicate of ``fd`` numbered 3 or more if ``fd`` is 0-2 (the caller closes it), else None.

    A worker started with a standard stream closed can be handed 0-2 for the
    directory; the child's dup2 of its pipes onto 0-2 would replace it.
    """
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) if fd <= 2 else None


async def run_command(
    *,
    argv: Sequence[str],
    stdin: bytes,
    env: Mapping[str, str],
    cwd_fd: int,
    timeout: float | None,
    channel: ExecChannel,
    handle: ExecHandle,
    on_start: Callable[[int], None] = lambda _pgid: None,
) -> ExecResult:
    """Run ``argv`` in the directory ``cwd_fd`` with exactly ``env``, feeding ``channel``.

    Returns the final result (exit code and flags, no output bytes). The
    child enters the directory through the descriptor, never by its path
    (see :func:`_enter`); the caller keeps and closes ``cwd_fd``.
    ``on_start(pgid)`` runs as soon as the command's process group exists
    (its kill action is already set, so it may call ``handle.destroy()``).

    A program that cannot be started gives exit code 127 (not found) or 126
    (not executable) with a message on stderr, as a shell would; a command
    line too large for the kernel is :class:`InvalidInput`. If the working
    directory cannot be entered, an :class:`OSError` is raised for the caller
    to translate.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    child_fds: list[int] = []
    low_fd = _above_stdio(cwd_fd)
    if low_fd is not None:
        cwd_fd = low_fd
    readers: list[_PipeReader] = []
    writer: _StdinWriter | None = None
    try:
        for stream in (OutputStream.STDOUT, OutputStream.STDERR):
            read_end, write_end = os.pipe()
            child_fds.append(write_end)
            readers.append(_PipeReader(loop, read_end, channel, stream))
        stdin_target: int = asyncio.subprocess.DEVNULL
        if stdin:
            read_end, write_end = os.pipe()
            child_fds.append(read_end)
            writer = _StdinWriter(loop, write_end, stdin)
            stdin_target = read_end
        try:
            process = await _start(
                argv,
                cwd_fd,
                stdin=stdin_target,
                stdout=child_fds[0],
                stderr=child_fds[1],
                env=dict(env),
                start_new_session=True,
            )
        except _CwdFailed:
            raise
        except OSError as exc:
            return _spawn_failure(argv[0], exc, channel)
        finally:
            # The child holds its own copies; ours must go so end-of-file can happen.
            while child_fds:
                os.close(child_fds.pop())
        # start_new_session: the child called setsid(), so its pgid is its pid.
        pgid = process.pid
        handle.set_kill(lambda: kill_group(pgid, signal.SIGKILL))
        on_start(pgid)
        outcome = await _supervise(process, readers, handle, deadline)
        return channel.result(
            exit_code=_exit_code(process.returncode) if outcome == "finished" else -1,
            timed_out=outcome == "timed_out",
            cancelled=outcome != "finished" and handle.destroyed,
        )
    finally:
        for fd in child_fds:
            os.close(fd)
        if low_fd is not None:
            os.close(low_fd)
        for reader in readers:
            reader.close()
        if writer is not None:
            writer.close()
