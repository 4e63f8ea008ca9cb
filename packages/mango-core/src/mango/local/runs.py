"""Records of running commands, so that a deletion from any process can stop them.

Every local command runs as its own process group. While it runs, the
process that started it keeps one record per group::

    <base>/.runs/mango-<32 hex>/<pgid>     content: the leader's start time (/proc)

beside the owner records, outside the session directory. Destroy (in any
process: ``mango sessions delete`` is usually not the worker that runs the
command) renames the session directory first, then kills every recorded
group, so no interleaving lets a command escape:

* the exec writes its record, *then* checks that the session directory is
  still there (if not, it kills its own group at once);
* destroy renames the directory, *then* reads the records.

Either the record was written before the rename (destroy sees it) or the
check came after it (the exec sees the rename). A record left by a worker
that crashed is harmless: a group is killed only if its leader's start time
matches the record (or the leader is gone and the group remains; the kernel
never reuses a number still in use as a process group). Where ``/proc`` is
not mounted the start time cannot be compared and recorded groups are killed
as they are.

These functions block; they are called from the event loop for one small
file each (the cost of an exec's ``fork``), or from a thread by destroy.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["RUNS_DIR", "forget_run", "kill_recorded_runs", "record_run", "runs_dir"]

RUNS_DIR = ".runs"
"""Directory under the base directory holding one sub-directory of records per sandbox."""

_PROC = Path("/proc")


def runs_dir(base_dir: Path, name: str) -> Path:
    """Where the records of the sandbox ``name`` live."""
    return base_dir / RUNS_DIR / name


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def record_run(base_dir: Path, name: str, pgid: int) -> Path | None:
    """Record the running group ``pgid`` of sandbox ``name``; return the record (None if not made).

    A failure to write is not fatal for the command (it still runs and is
    still killed by a destroy in this process); it only loses the
    cross-process stop for this one command.
    """
    directory = runs_dir(base_dir, name)
    record = directory / str(pgid)
    payload = (_start_time(pgid) or "").encode()
    for attempt in range(2):
        try:
            fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            if attempt:
                return None
            with contextlib.suppress(OSError):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            continue
        except OSError:
            return None
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
        return record
    return None


def forget_run(record: Path | None) -> None:
    """Remove a record once its command has ended."""
    if record is not None:
        with contextlib.suppress(OSError):
            record.unlink()


def _killable(pgid: int, recorded: str) -> bool:
    if not _PROC.is_dir():
        return True
    current = _start_time(pgid)
    if current is None:
        return True  # the leader is gone; whatever is left of its group is still that group
    return not recorded or current == recorded


def kill_recorded_runs(base_dir: Path, name: str) -> int:
    """SIGKILL every recorded group of sandbox ``name``; return how many were signalled."""
    directory = runs_dir(base_dir, name)
    try:
        records = list(directory.iterdir())
    except OSError:
        return 0
    killed = 0
    for record in records:
        try:
            pgid = int(record.name)
            recorded = record.read_text().strip()
        except (ValueError, OSError):
            continue
        # Never group 0/1 or our own group, whatever a record says.
        if pgid > 1 and pgid != os.getpgrp() and _killable(pgid, recorded):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
    return killed
