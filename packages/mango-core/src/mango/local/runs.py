"""A log of started commands, so that a deletion from any process can stop them.

Every local command runs as its own process group. The process that starts
one appends a line to the sandbox's run log, beside the owner records and
outside the session directory::

    <base>/.runs/mango-<32 hex>        one line per started command: "<pgid> <boot ns>\n"

Destroy (in any process: ``mango sessions delete`` is usually not the worker
that runs the command) renames the session directory first, then kills every
logged group, so no interleaving lets a command escape:

* the exec appends its line, *then* checks that the session directory is
  still there (if not, it kills its own group at once);
* destroy renames the directory, *then* reads the log.

Either the line was written before the rename (destroy reads it) or the
check came after it (the exec sees the rename). Appending to a file that
exists costs a few microseconds; creating and unlinking a file per command
would cost a journal commit. Lines of commands that have ended stay until
the log passes :data:`COMPACT_BYTES`; then the appender rewrites it with the
groups that still exist (under an exclusive ``flock``; appenders hold a
shared one). A group is killed only if its leader started no later than its
line was written (``/proc/<pid>/stat`` against ``CLOCK_BOOTTIME``), so a
number the kernel gave to a newer process is left alone; a leader that is
gone leaves a group that is still the logged one (the kernel never reuses a
number still in use as a process group). Where ``/proc`` is not mounted that
check cannot be made and logged groups are killed as they are.

These functions block; the exec path appends from the event loop (one
``open``, ``flock``, ``write``, ``close``), destroy runs in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path

__all__ = [
    "COMPACT_BYTES",
    "RUNS_DIR",
    "group_is_recorded",
    "kill_logged_runs",
    "log_run",
    "run_log",
]

RUNS_DIR = ".runs"
"""Directory under the base directory holding one run log per sandbox."""
COMPACT_BYTES = 64 * 1024
"""Size past which an appender rewrites the log with the groups that still exist."""

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def run_log(base_dir: Path, name: str) -> Path:
    """The run log of the sandbox ``name``."""
    return base_dir / RUNS_DIR / name


def _boot_ns() -> int:
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return 0 if clock is None else time.clock_gettime_ns(clock)


def _parse(line: bytes) -> tuple[int, int] | None:
    fields = line.split()
    if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    return int(fields[0]), int(fields[1])


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _compact(path: str) -> None:
    """Rewrite the log in place with the lines whose group still exists (exclusive lock held)."""
    # A second descriptor without O_APPEND: on Linux, pwrite on an O_APPEND one appends.
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _rewrite(fd)
    finally:
        os.close(fd)


def _rewrite(fd: int) -> None:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    kept = [
        line + b"\n"
        for line in b"".join(chunks).splitlines()
        if (entry := _parse(line)) is not None and _alive(entry[0])
    ]
    payload = b"".join(kept)
    # Live lines first, then cut: a crash in between leaves stale lines, never fewer live ones.
    os.pwrite(fd, payload, 0)
    os.ftruncate(fd, len(payload))


def log_run(path: str, pgid: int, *, create: bool = False) -> bool:
    """Append the started group ``pgid`` to the run log ``path``; False if there is no log.

    ``path`` is :func:`run_log` as a string (the exec path builds no Path
    objects). ``create`` makes a missing log (a sandbox from before run logs
    existed). A failure to write is not fatal to the command (it still runs,
    and a destroy in this process still kills it); it only loses the
    cross-process stop for this one command.
    """
    try:
        fd = os.open(path, _APPEND | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unusable log: see above
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.write(fd, b"%d %d\n" % (pgid, _boot_ns()))
        if os.lseek(fd, 0, os.SEEK_CUR) > COMPACT_BYTES:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size > COMPACT_BYTES:  # nobody compacted it meanwhile
                _compact(path)
    except OSError:
        pass  # as above: the command runs on
    finally:
        os.close(fd)  # releases the lock
    return True


def _leader_started_ns(pid: int) -> int | None:
    """When the process ``pid`` started, in ns of ``CLOCK_BOOTTIME``; None if it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) <= 19 or not fields[19].isdigit():
        return None
    return int(fields[19]) * 1_000_000_000 // _TICKS


def group_is_recorded(pgid: int, logged_ns: int) -> bool:
    """True unless the leader of ``pgid`` started after ``logged_ns`` (a reused number).

    ``logged_ns`` is ``CLOCK_BOOTTIME`` when the group was recorded (0: unknown).
    """
    if not _PROC.is_dir() or not logged_ns:
        return True
    started = _leader_started_ns(pgid)
    if started is None:
        return True  # the leader is gone; whatever is left of its group is still that group
    # Start times have clock-tick resolution: allow one tick.
    return started <= logged_ns + 1_000_000_000 // _TICKS


def kill_logged_runs(base_dir: Path, name: str) -> int:
    """SIGKILL every logged group of sandbox ``name`` that still exists; return how many."""
    try:
        raw = run_log(base_dir, name).read_bytes()
    except OSError:
        return 0
    latest: dict[int, int] = {}
    for line in raw.splitlines():
        if (entry := _parse(line)) is not None:
            latest[entry[0]] = max(latest.get(entry[0], 0), entry[1])
    killed = 0
    own = os.getpgrp()
    for pgid, logged_ns in latest.items():
        # Never group 0/1 or our own group, whatever a line says.
        if pgid <= 1 or pgid == own or not group_is_recorded(pgid, logged_ns):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
    return killed
