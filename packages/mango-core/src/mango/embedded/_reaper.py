"""The reaper: a detached process that stops an idle embedded PostgreSQL.

This module starts, finds and ends it; the process itself is
:mod:`mango.embedded.reaper` (which needs :mod:`mango.embedded.postgres`, the
module that starts it through :func:`ensure_reaper`).

The command line leaves the embedded server running after a command, so the
next one joins it instead of paying a start and a stop. Something must stop
it once nobody uses it, even when the last command was killed with SIGKILL
and never got to clean up: that is this process. There is at most one per
data directory ``D``; it holds an exclusive ``flock`` on ``D.reaper`` (which
also records its pid) for its whole life, so a second one started by a
concurrent command sees the lock and exits at once.

It sleeps until the server has been unused for the idle period (the mtime of
``D.holders``, which every handle touches when it takes and releases the
server), then stops it under the start lock if no handle holds it, and
exits. It exits as well when the server is gone (stopped by ``mango embedded
stop`` or by a process that does not linger) or the directory was removed.

It is started through ``/bin/sh -c '... &'``: the shell exits at once (the
caller reaps it), so the reaper is never a zombie child of a long-lived
process, and ``start_new_session`` keeps a terminal's Ctrl-C away from it.
The caller reads the reaper's standard output to its end: the reaper closes
it once it holds its lock (or knows another one does), so when
:func:`ensure_reaper` returns, a reaper is in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["ensure_reaper", "reaper_path", "reaper_pid", "stop_reaper"]

_LOG = logging.getLogger(__name__)
_LAUNCH = '"$@" </dev/null 2>"$0" &'


def reaper_path(data_dir: Path) -> Path:
    """``D.reaper``: the reaper's lock, holding its pid."""
    return data_dir.with_name(f"{data_dir.name}.reaper")


def _log_path(data_dir: Path) -> Path:
    return data_dir.with_name(f"{data_dir.name}.reaper.log")


def reaper_pid(data_dir: Path) -> int | None:
    """The pid of the reaper of ``data_dir``, or None if none runs."""
    path = reaper_path(data_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode("ascii", errors="replace").strip()
            return int(text) if text.isdigit() else None
        return None  # nobody holds it: no reaper
    finally:
        os.close(fd)


def ensure_reaper(data_dir: Path, idle_seconds: float, timeout: float) -> bool:
    """Start the reaper of ``data_dir`` unless one already runs; True once one is in place.

    Returns when the reaper holds its lock. Costs a ``sh`` and the reaper's
    start (stdlib only) when none runs, which is when the server was just
    started; nothing otherwise. False if none could be started (the caller
    then stops the server itself).
    """
    if reaper_pid(data_dir) is not None:
        return True
    argv = [
        sys.executable,
        "-m",
        "mango.embedded.reaper",
        str(data_dir),
        repr(float(idle_seconds)),
        repr(float(timeout)),
    ]
    try:
        subprocess.run(
            ["/bin/sh", "-c", _LAUNCH, str(_log_path(data_dir)), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,  # read to its end: closed by the reaper once it is in place
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _LOG.warning("could not start the PostgreSQL reaper for %s: %s", data_dir, exc)
        return False
    return reaper_pid(data_dir) is not None


def stop_reaper(data_dir: Path) -> None:
    """End the reaper of ``data_dir`` if one runs (its server was stopped another way)."""
    pid = reaper_pid(data_dir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
