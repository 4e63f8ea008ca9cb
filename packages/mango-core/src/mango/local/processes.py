"""Background processes of local sandboxes: their records, outside every session directory.

::

    <base>/.procs/mango-<32 hex>/<process id>/   one directory per background process
        meta.json        id, argv, start time (written before the supervisor starts)
        stdin            a FIFO: the process's stdin (send_stdin writes to it)
        stdin.initial    Command.stdin, until the supervisor has written it
        pid.json         pid, process group, supervisor pid, CLOCK_BOOTTIME at start
        log.<offset>     the capped log, in segments (see mango.local.supervisor)
        kill             present once someone killed it (or its timeout passed)
        exit.json        state and exit code, written last, atomically

Each process has a supervisor (:mod:`mango.local.supervisor`), started
detached from the worker, that waits for it and writes ``exit.json`` even when
the worker that started it is gone; everything else here is plain files, so a
fresh provider in another process (after a restart, or ``mango processes``
from the command line) lists, reads, waits for, feeds and kills it. Process
ids sort by start time (``p-<ns, hex>-<random>``), so a listing is oldest
first by name.

A kill or a destroy signals a recorded process group only while its leader is
the process that was recorded (its start time, from ``/proc``, is no later
than the ``CLOCK_BOOTTIME`` the record carries), so a pid the kernel gave to a
newer process is left alone (see :mod:`mango.local.runs`).

These functions block; the sandbox runs them in threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mango.local.removal import remove_tree
from mango.local.runs import group_is_recorded
from mango.local.supervisor import write_atomically
from mango.provider import (
    InvalidInput,
    PermanentError,
    ProcessInfo,
    ProcessNotFound,
    ProcessOutput,
    ProcessState,
    ProviderUnavailable,
    SandboxNotFound,
)

__all__ = [
    "KILL_WAIT_SECONDS",
    "PROCS_DIR",
    "START_WAIT_SECONDS",
    "kill_process",
    "kill_recorded_processes",
    "list_processes",
    "process_dir",
    "process_info",
    "processes_dir",
    "read_log",
    "remove_processes",
    "start_process",
    "stdin_fd",
]

PROCS_DIR = ".procs"
"""Directory under the base directory holding the background processes of each sandbox."""
START_WAIT_SECONDS = 10.0
"""How long a start waits for the supervisor to report the pid."""
KILL_WAIT_SECONDS = 10.0
"""How long a kill waits for the supervisor to record the end."""

_SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
_ID = re.compile(r"p-[0-9a-f]{1,16}-[0-9a-f]{8}\Z")
_SEGMENT = re.compile(r"log\.([0-9]{20})\Z")


def processes_dir(base_dir: Path, name: str) -> Path:
    """Where the background processes of the sandbox ``name`` are recorded."""
    return base_dir / PROCS_DIR / name


def process_dir(base_dir: Path, name: str, process_id: str) -> Path:
    """The directory of ``process_id``; :class:`ProcessNotFound` if there is no such process."""
    if not isinstance(process_id, str) or not _ID.match(process_id):
        raise ProcessNotFound(str(process_id))
    path = processes_dir(base_dir, name) / process_id
    if not (path / "meta.json").is_file():
        raise ProcessNotFound(process_id)
    return path


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def start_process(
    base_dir: Path,
    name: str,
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd_fd: int,
    stdin: bytes,
    timeout: float | None,
    log_cap: int,
) -> tuple[str, int | None]:
    """Record and start a background process; return its id and pid (None if it never ran)."""
    session_dir = base_dir / name
    root = processes_dir(base_dir, name)
    root.parent.mkdir(mode=0o700, exist_ok=True)
    root.mkdir(mode=0o700, exist_ok=True)
    process_id = f"p-{time.time_ns():016x}-{secrets.token_hex(4)}"
    directory = root / process_id
    directory.mkdir(mode=0o700)
    os.mkfifo(directory / "stdin", 0o600)
    if stdin:
        (directory / "stdin.initial").write_bytes(stdin)
    started = datetime.now(UTC).isoformat()
    write_atomically(
        str(directory / "meta.json"),
        {"id": process_id, "argv": list(argv), "started_at": started},
    )
    args = [
        sys.executable,
        "-I",
        "-S",
        _SUPERVISOR,
        str(directory),
        str(session_dir),
        str(log_cap),
        repr(float(timeout or 0)),
        str(cwd_fd),
        "--",
        *argv,
    ]
    try:
        supervisor = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(cwd_fd,),
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        remove_tree(directory)
        raise ProviderUnavailable(f"cannot start the process supervisor: {exc}") from exc
    assert supervisor.stdout is not None  # noqa: S101 - stdout=PIPE above
    report = _read_report(supervisor.stdout.fileno(), START_WAIT_SECONDS)
    supervisor.stdout.close()
    supervisor.wait()  # the first process exits at once: the supervisor forked
    if report == b"-":
        return process_id, None
    if not report.isdigit():
        raise ProviderUnavailable(
            f"the supervisor of background process {process_id} did not report its pid "
            f"within {START_WAIT_SECONDS:.0f}s"
        )
    return process_id, int(report)


def _read_report(fd: int, bound: float) -> bytes:
    deadline = time.monotonic() + bound
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            break
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data.strip()


def process_info(directory: Path) -> ProcessInfo:
    """The process recorded in ``directory``, as it is now."""
    meta = _read_json(directory / "meta.json")
    if meta is None:
        raise ProcessNotFound(directory.name)
    ended = _read_json(directory / "exit.json")
    pid = _read_json(directory / "pid.json")
    state = ProcessState.RUNNING
    exit_code = None
    if ended is not None:
        state = ProcessState(ended.get("state", ProcessState.EXITED))
        exit_code = ended.get("exit_code")
    elif pid is not None and not _supervised(pid):
        ended = _read_json(directory / "exit.json")  # it may have ended since the first look
        if ended is None:
            # The supervisor was killed behind mango's back: nothing will record the end.
            state = ProcessState.KILLED
        else:
            state = ProcessState(ended.get("state", ProcessState.EXITED))
            exit_code = ended.get("exit_code")
    started = meta.get("started_at")
    return ProcessInfo(
        id=directory.name,
        argv=tuple(meta.get("argv", ())),
        state=state,
        pid=None if pid is None else pid.get("pid"),
        exit_code=exit_code,
        started_at=datetime.fromisoformat(started) if isinstance(started, str) else None,
    )


def _supervised(pid: Mapping[str, Any]) -> bool:
    supervisor = pid.get("supervisor")
    if not isinstance(supervisor, int):
        return False
    try:
        os.kill(supervisor, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return group_is_recorded(supervisor, int(pid.get("boot_ns", 0)))


def list_processes(base_dir: Path, name: str) -> list[ProcessInfo]:
    """Every recorded process of the sandbox ``name``, oldest first."""
    root = processes_dir(base_dir, name)
    try:
        names = sorted(entry.name for entry in root.iterdir() if _ID.match(entry.name))
    except FileNotFoundError:
        return []
    infos = []
    for entry in names:
        with contextlib.suppress(ProcessNotFound):
            infos.append(process_info(root / entry))
    return infos


def _segments(directory: Path) -> list[int]:
    starts = []
    for entry in directory.iterdir():
        match = _SEGMENT.match(entry.name)
        if match:
            starts.append(int(match.group(1)))
    return sorted(starts)


def read_log(directory: Path, since: int, max_bytes: int) -> ProcessOutput:
    """At most ``max_bytes`` of the log of ``directory`` from byte ``since`` (see ProcessOutput)."""
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise InvalidInput(f"since must be a byte offset (0 or more), got {since!r}")
    ended = (directory / "exit.json").exists()  # before the segments: then they are final
    for _ in range(8):  # a segment pruned between the listing and the read: list again
        try:
            return _read_segments(directory, since, max_bytes, ended)
        except FileNotFoundError:
            if not directory.is_dir():
                raise ProcessNotFound(directory.name) from None
    raise ProviderUnavailable(f"the log of {directory.name} is pruned faster than it is read")


def _read_segments(directory: Path, since: int, max_bytes: int, ended: bool) -> ProcessOutput:
    starts = _segments(directory)
    if not starts:
        return ProcessOutput(b"", since, since, complete=ended)
    first = starts[0]
    offset = max(since, first)
    chunks: list[bytes] = []
    wanted = max_bytes
    position = offset
    end = first
    for index, start in enumerate(starts):
        path = directory / f"log.{start:020d}"
        following = starts[index + 1] if index + 1 < len(starts) else None
        if following is not None and following <= position:
            continue
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            end = start + size
            if wanted > 0 and position < end:
                handle.seek(position - start)
                data = handle.read(min(wanted, end - position))
                chunks.append(data)
                position += len(data)
                wanted -= len(data)
    data = b"".join(chunks)
    if offset > end:  # past what was written: nothing yet (or, once ended, ever)
        return ProcessOutput(b"", since, since, complete=ended, dropped=first)
    next_offset = offset + len(data)
    return ProcessOutput(
        data, offset, next_offset, complete=ended and next_offset >= end, dropped=first
    )


def _signal_group(pid: Mapping[str, Any], key: str) -> None:
    target = pid.get(key)
    if not isinstance(target, int) or target <= 1 or target == os.getpgrp():
        return
    if group_is_recorded(target, int(pid.get("boot_ns", 0))):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(target, signal.SIGKILL)


def kill_process(directory: Path) -> ProcessInfo:
    """Kill the process tree of ``directory`` (idempotent); return its state once recorded."""
    info = process_info(directory)
    pid = _read_json(directory / "pid.json")
    if pid is None:
        return info  # never ran (exit 127)
    if info.state is ProcessState.RUNNING:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(directory / "kill", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    _signal_group(pid, "pgid")  # also what an exited leader left running in its group
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while info.state is ProcessState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.02)
        info = process_info(directory)
    if info.state is ProcessState.RUNNING:
        raise ProviderUnavailable(
            f"background process {directory.name} was killed but its end was not recorded "
            f"within {KILL_WAIT_SECONDS:.0f}s"
        )
    return info


def stdin_fd(directory: Path) -> int:
    """A non-blocking descriptor of the process's stdin; PermanentError if it has ended."""
    if process_info(directory).state is not ProcessState.RUNNING:
        raise PermanentError(f"background process {directory.name} has ended: no stdin")
    try:
        return os.open(directory / "stdin", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # ENXIO: nobody reads it any more
        raise PermanentError(f"background process {directory.name} has ended: no stdin") from exc


def kill_recorded_processes(base_dir: Path, name: str) -> None:
    """SIGKILL every recorded process group of sandbox ``name`` and its supervisor."""
    root = processes_dir(base_dir, name)
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        pid = _read_json(entry / "pid.json")
        if pid is not None:
            _signal_group(pid, "pgid")
            _signal_group(pid, "supervisor")


def remove_processes(base_dir: Path, name: str) -> None:
    """Kill every recorded process of sandbox ``name``, then remove the records."""
    kill_recorded_processes(base_dir, name)
    remove_tree(processes_dir(base_dir, name))


def sandbox_gone(session_dir: Path) -> SandboxNotFound:
    """The error for a process call on a sandbox that a destroy removed."""
    return SandboxNotFound(f"local sandbox {session_dir} is gone")
