"""Every process a fake sandbox started dies with it, however it detached.

A vendor's sandbox is a container or a VM: when it is deleted, every process
in it dies, including those that left their process group with ``setsid``
(mango's background-process supervisor does). A fake sandbox's processes are
host processes, so the fake marks them: each command a fake starts in the
background carries :data:`SANDBOX_MARK` in its environment, which every
descendant inherits, and :func:`kill_marked` finds them through
``/proc/<pid>/environ`` and kills them. Where ``/proc`` is missing it does
nothing (the fakes run on Linux).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["SANDBOX_MARK", "kill_marked", "mark"]

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
