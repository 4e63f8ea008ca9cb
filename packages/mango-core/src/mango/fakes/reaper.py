"""Every process a fake sandbox started dies with it, however it detached.

A vendor's sandbox is a container or a VM: when it is deleted, every process
in it dies, including those that left their process group with ``setsid``
(mango's background-process supervisor does). A fake sandbox's processes are
host processes, so the fake marks them: each command a fake starts in the
background carries :data:`SANDBOX_MARK` in its environment, which every
descendant inherits, and :func:`kill_marked` finds them through
``/proc/<pid>/environ`` and kills them. Where ``/proc`` is missing it does
nothing (the fakes run on Linux).

The same mark freezes a sandbox whose vendor's pause keeps its memory (a
container's cgroup freezer, a VM snapshot): :func:`stop_marked` stops every
marked process (``SIGSTOP``, in passes until a pass finds none still
running, so a child forked meanwhile is stopped too), :func:`continue_marked`
continues them (``SIGCONT``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["SANDBOX_MARK", "continue_marked", "kill_marked", "mark", "stop_marked"]

SANDBOX_MARK = "MANGO_FAKE_SANDBOX"
"""The environment variable that names the fake sandbox a process runs in."""
_PROC = Path("/proc")
_ROUNDS = 5
"""Passes over ``/proc``: a process forked during one pass is found in the next."""


def mark(sandbox_id: str) -> dict[str, str]:
    """The environment entry that marks a process as running in ``sandbox_id``."""
    return {SANDBOX_MARK: sandbox_id}


def _marked(sandbox_id: str) -> list[int]:
    wanted = f"{SANDBOX_MARK}={sandbox_id}".encode()
    found: list[int] = []
    own = os.getpid()
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_marked(sandbox_id: str) -> int:
    """SIGKILL every process marked with ``sandbox_id``; return how many were signalled."""
    killed = 0
    for _ in range(_ROUNDS):
        pids = _marked(sandbox_id)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


_STOP_BIT = 1 << (signal.SIGSTOP - 1)


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (state ``T``), gone, or bound to stop.

    A process in the kernel (state ``D``: a page fault, an ``exec``) takes
    its pending ``SIGSTOP`` on the way out, before it runs any more of its
    own code: it counts as stopped.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return True
    # "pid (comm) S ...": the state follows the last ")" (comm may hold one).
    state = stat.rsplit(b")", 1)[-1].split()[:1]
    if state in ([b"T"], [b"t"], [b"Z"], [b"X"]):
        return True
    if state != [b"D"]:
        return False
    try:
        status = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & _STOP_BIT)


def stop_marked(sandbox_id: str) -> int:
    """SIGSTOP every process marked with ``sandbox_id``; return how many were signalled.

    Passes repeat until every marked process is stopped (a stopped process
    cannot fork), bounded by a hundred passes.
    """
    stopped: set[int] = set()
    for _ in range(100):
        running = [pid for pid in _marked(sandbox_id) if not _stopped(pid)]
        if not running:
            break
        for pid in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
    return len(stopped)


def continue_marked(sandbox_id: str) -> int:
    """SIGCONT every process marked with ``sandbox_id``; return how many were signalled."""
    continued = 0
    for pid in _marked(sandbox_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
            continued += 1
    return continued
