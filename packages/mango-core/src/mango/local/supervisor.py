"""The supervisor of one local background process: a script, standard library only.

Run by :mod:`mango.local.processes` as ``python -I -S supervisor.py PROC_DIR
SESSION_DIR CAP TIMEOUT CWD_FD -- ARGV...`` (no mango import, so it starts in
milliseconds and survives whatever happens to the worker). It forks once and
the first process exits at once (the worker reaps it), so the supervisor
belongs to no worker: it is a session leader of its own, and the command runs
in a process group of its own inside that session (one ``killpg`` ends the
command's tree, never the supervisor).

It keeps, in ``PROC_DIR`` (see :mod:`mango.local.processes` for the layout):

* the log: the command's stdout and stderr through one pipe, as written, in
  segments ``log.<first offset, 20 digits>`` of at most ``CAP / 8`` bytes;
  once the segments hold more than ``CAP`` bytes the oldest is removed (its
  bytes are the dropped ones);
* ``pid.json`` (pid, process group, this supervisor's pid, ``CLOCK_BOOTTIME``
  when the command had started), written atomically before it reports the pid
  on its stdout and closes it;
* ``exit.json`` (state, exit code, end time), written atomically once the
  command has exited and its log reached end-of-file (or, after a kill, one
  second later: a grandchild that left the group cannot hold it open), after
  the last byte of the log.

``kill`` in ``PROC_DIR`` (written by whoever kills, or by this supervisor when
``TIMEOUT`` passes) makes the state ``killed``. The command's stdin is the
FIFO ``stdin``, held open for reading and writing, so it never reads
end-of-file; the bytes of ``stdin.initial`` are written to it first.

After writing ``pid.json`` the supervisor checks that ``SESSION_DIR`` still
exists; a destroy renames it *before* it reads the ``pid.json`` files, so
either the destroy kills this command or the command is killed here.
"""

# A fresh interpreter runs this for every background process: plain os calls, no pathlib.
# ruff: noqa: PTH104, PTH108, PTH110, PTH112, PTH118, PTH123

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

SEGMENTS = 8
"""The log cap is kept in this many segments (at least one byte each)."""
KILL_DRAIN_SECONDS = 1.0
"""After a kill, how long the log may stay open once the leader has exited."""
_CHUNK = 64 * 1024


def boot_ns() -> int:
    """Now, in ns of ``CLOCK_BOOTTIME`` (0 where the clock does not exist)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return 0 if clock is None else time.clock_gettime_ns(clock)


def write_atomically(path: str, document: dict[str, object]) -> None:
    """Write ``document`` as JSON to ``path`` through a temporary file and a rename."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(document, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)


class Log:
    """The capped, segmented log (see the module docstring)."""

    def __init__(self, directory: str, cap: int) -> None:
        self.directory = directory
        self.cap = cap
        self.segment_bytes = max(cap // SEGMENTS, 1)
        self.starts: list[int] = []
        self.offset = 0
        self.fd: int | None = None
        self.size = 0

    def _path(self, start: int) -> str:
        return os.path.join(self.directory, f"log.{start:020d}")

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.fd is None or self.size >= self.segment_bytes:
                if self.fd is not None:
                    os.close(self.fd)
                self.fd = os.open(
                    self._path(self.offset),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                    0o600,
                )
                self.starts.append(self.offset)
                self.size = 0
            piece = view[: self.segment_bytes - self.size]
            written = os.write(self.fd, piece)
            view = view[written:]
            self.size += written
            self.offset += written
            self._prune()

    def _prune(self) -> None:
        while len(self.starts) > 1 and self.offset - self.starts[0] > self.cap:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(self.starts.pop(0)))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _spawn_failure(program: str, exc: OSError) -> tuple[int, bytes]:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        reason = "No such file or directory" if "/" in program else "command not found"
        code = 127
    else:
        reason = exc.strerror or type(exc).__name__
        code = 126
    return code, f"mango: {program}: {reason}\n".encode("utf-8", "backslashreplace")


def _finish(proc_dir: str, state: str, exit_code: int | None) -> None:
    ended = datetime.now(UTC).isoformat()
    write_atomically(
        os.path.join(proc_dir, "exit.json"),
        {"state": state, "exit_code": exit_code, "ended_at": ended},
    )


def _report(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(1, text.encode())
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def supervise(proc_dir: str, session_dir: str, cap: int, timeout: float, argv: list[str]) -> None:
    """Start ``argv`` (in the current directory) and keep its log and state until it ends."""
    log = Log(proc_dir, cap)
    fifo = os.open(os.path.join(proc_dir, "stdin"), os.O_RDWR | os.O_CLOEXEC)
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            argv,
            stdin=fifo,
            stdout=write_end,
            stderr=write_end,
            process_group=0,
            close_fds=True,
        )
    except OSError as exc:
        os.chdir("/")
        code, message = _spawn_failure(argv[0], exc)
        log.write(message)
        log.close()
        _finish(proc_dir, "exited", code)
        _report("-\n")
        return
    os.chdir("/")  # never pin the workspace
    os.close(write_end)
    write_atomically(
        os.path.join(proc_dir, "pid.json"),
        {"pid": child.pid, "pgid": child.pid, "supervisor": os.getpid(), "boot_ns": boot_ns()},
    )
    if not os.path.isdir(session_dir):  # destroyed while starting: see the module docstring
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
    _report(f"{child.pid}\n")
    _run(proc_dir, child, log, read_end, timeout)
    os.close(fifo)


def _pending_stdin(proc_dir: str) -> bytes:
    path = os.path.join(proc_dir, "stdin.initial")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return b""
    os.unlink(path)
    return data


class _Supervision:
    """The loop of one supervised command: its log, its stdin, its timeout, its end."""

    def __init__(self, proc_dir: str, child: subprocess.Popen[bytes], log: Log) -> None:
        self.proc_dir = proc_dir
        self.child = child
        self.log = log
        self.kill_marker = os.path.join(proc_dir, "kill")
        self.returncode: int | None = None
        self.eof = False
        self.deadline: float | None = None
        self.drain_until: float | None = None
        self.pending = _pending_stdin(proc_dir)
        self.stdin = os.open(
            os.path.join(proc_dir, "stdin"), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC
        )
        self.wake, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(self.wake, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_write)

    def _timed_out(self) -> None:
        with contextlib.suppress(OSError):
            os.close(os.open(self.kill_marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        with contextlib.suppress(OSError):
            os.killpg(self.child.pid, signal.SIGKILL)
        self.deadline = None

    def _bound(self, now: float) -> float | None:
        """How long the next select may wait; None: until something happens."""
        waits = [t - now for t in (self.deadline, self.drain_until) if t is not None]
        if self.returncode is not None and self.drain_until is None:
            waits.append(0.5)  # a kill marker may come while a grandchild holds the log
        return max(min(waits), 0.0) if waits else None

    def _feed_stdin(self) -> None:
        try:
            self.pending = self.pending[os.write(self.stdin, self.pending) :]
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            self.pending = b""

    def step(self, read_end: int) -> bool:
        """One turn of the loop; False once the command has ended (its log closed)."""
        if self.returncode is None:
            self.returncode = self.child.poll()
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline and self.returncode is None:
            self._timed_out()
        if self.returncode is not None:
            if self.eof:
                return False
            if self.drain_until is None and os.path.exists(self.kill_marker):
                self.drain_until = now + KILL_DRAIN_SECONDS
            if self.drain_until is not None and now >= self.drain_until:
                return False
        readers = [self.wake] + ([] if self.eof else [read_end])
        writers = [self.stdin] if self.pending else []
        try:
            ready, writable, _ = select.select(readers, writers, [], self._bound(now))
        except InterruptedError:
            return True
        if self.wake in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake, 4096)
        if read_end in ready:
            data = os.read(read_end, _CHUNK)
            if data:
                self.log.write(data)
            else:
                self.eof = True
        if writable:
            self._feed_stdin()
        return True

    def finish(self) -> None:
        """Close the log and stdin, then record the end (``exit.json``, last)."""
        self.log.close()
        os.close(self.stdin)
        state = "killed" if os.path.exists(self.kill_marker) else "exited"
        _finish(self.proc_dir, state, self.returncode)


def _run(
    proc_dir: str, child: subprocess.Popen[bytes], log: Log, read_end: int, timeout: float
) -> None:
    supervision = _Supervision(proc_dir, child, log)
    if timeout > 0:
        supervision.deadline = time.monotonic() + timeout
    while supervision.step(read_end):
        pass
    supervision.finish()


def main(args: list[str]) -> int:
    """Parse the command line (see the module docstring), detach, supervise."""
    proc_dir, session_dir, cap, timeout, cwd_fd, separator, *argv = args
    if separator != "--" or not argv:
        return 2
    if os.fork():
        return 0  # the worker reaps this one; the supervisor is reparented
    os.setsid()
    os.fchdir(int(cwd_fd))
    os.close(int(cwd_fd))
    try:
        supervise(proc_dir, session_dir, int(cap), float(timeout), argv)
    except FileNotFoundError:
        # The process directory went away: a destroy removed the sandbox meanwhile.
        return 0
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
