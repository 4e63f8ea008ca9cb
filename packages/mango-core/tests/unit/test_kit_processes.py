"""The kit's background-process supervisor, run by a real /bin/sh on this host.

The supervisor line, the listing and the log line are shell text that every
remote provider runs in its sandbox; here they run in a temporary directory
(the process root), so the rules are proven without a vendor.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mango.fakes import continue_marked, kill_marked, mark, stop_marked
from mango.provider import Command, InvalidInput, ProcessNotFound, ProcessState
from mango.provider.processes import (
    ProcessRecord,
    check_process_id,
    check_window,
    launch_line,
    listing_line,
    log_line,
    output_slice,
    parse_listing,
    parse_log_answer,
    process_directory,
    wait_line,
)

GUARD_SECONDS = 20.0
"""A liveness bound for the shell lines below (never a timing)."""


def _sh(line: str, *, check: bool = True, **kwargs: object) -> bytes:
    return subprocess.run(
        ["/bin/sh", "-c", line], check=check, capture_output=True, timeout=GUARD_SECONDS, **kwargs
    ).stdout


def _run(tmp_path: Path, command: Command, process_id: str, *, cap: int = 1 << 20) -> str:
    """Launch ``command`` as a vendor would (detached), wait for its end; return its dir."""
    root = tmp_path / "processes"
    directory = process_directory(process_id, str(root))
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    line = launch_line(
        command, datetime.now(UTC), root=str(workspace), directory=directory, detach=True, cap=cap
    )
    # The launching shell reports the supervisor's end (137 after a kill), as a session would.
    _sh(line, check=False, cwd=workspace, stdin=subprocess.DEVNULL)
    _sh(wait_line(directory, GUARD_SECONDS))
    return directory


def _record(tmp_path: Path, process_id: str) -> ProcessRecord:
    [record] = parse_listing(_sh(listing_line(str(tmp_path / "processes"))).decode())
    assert record.id == process_id
    return record


def test_an_exit_its_log_and_a_byte_range(tmp_path: Path) -> None:
    """stdout and stderr in one log as written; the exit status; a log slice by offset."""
    command = Command(("sh", "-c", "echo out; echo err >&2; echo again; exit 3"))
    directory = _run(tmp_path, command, "p1-exit")
    record = _record(tmp_path, "p1-exit")
    info = record.info(running=record.alive)
    assert (info.state, info.exit_code, info.argv) == (ProcessState.EXITED, 3, command.argv)
    assert info.started_at is not None
    data, offset, size, dropped = parse_log_answer(_sh(log_line(directory, 4, 4)), 4)
    assert (data, offset, size, dropped) == (b"err\n", 4, len(b"out\nerr\nagain\n"), 0)


def test_the_log_keeps_its_cap_and_counts_what_it_dropped(tmp_path: Path) -> None:
    """Past the cap the oldest segments go; offsets still count from the first byte."""
    expected = b"".join(b"%05d\n" % i for i in range(1000))  # 6000 bytes
    command = Command(
        ("sh", "-c", "i=0; while [ $i -lt 1000 ]; do printf '%05d\\n' $i; i=$((i+1)); done")
    )
    directory = _run(tmp_path, command, "p1-capped", cap=800)
    data, offset, size, dropped = parse_log_answer(_sh(log_line(directory, 0, 10_000)), 0)
    assert size == len(expected)
    assert 0 < dropped == offset
    assert data == expected[dropped:]
    assert len(data) <= 800 + 2 * 100  # the cap, give or take a segment
    part, at, _size, _dropped = parse_log_answer(_sh(log_line(directory, 5990, 4)), 5990)
    assert (part, at) == (expected[5990:5994], 5990)


def test_a_signal_is_negative_and_a_timeout_is_a_kill(tmp_path: Path) -> None:
    """A command killed by SIGTERM exits -15; command.timeout kills the tree (KILLED)."""
    _run(tmp_path, Command(("sh", "-c", "kill -TERM $$")), "p1-signal")
    record = _record(tmp_path, "p1-signal")
    assert record.info(running=False).exit_code == -15
    (tmp_path / "processes" / "p1-signal").rename(tmp_path / "elsewhere")
    _run(tmp_path, Command(("sleep", "30"), timeout=0.2), "p2-timeout")
    record = _record(tmp_path, "p2-timeout")
    info = record.info(running=record.alive)
    assert (info.state, record.alive) == (ProcessState.KILLED, False)


def test_a_missing_program_exits_127(tmp_path: Path) -> None:
    """As for exec: mango's own words and 127."""
    directory = _run(tmp_path, Command(("mango-no-such-program",)), "p1-missing")
    assert _record(tmp_path, "p1-missing").exit == 127
    assert b"mango-no-such-program: command not found" in Path(directory, "log.0").read_bytes()


def test_listing_rules() -> None:
    """An exit wins over a late kill; no exit, no kill and not running: lost (killed, no code)."""
    meta = '{"argv":["a"],"started_at":"2026-01-01T00:00:00+00:00"}'
    text = "\n".join(
        [
            f"p2\t12\t0\t1\t0\t-\t{meta}",
            f"p1\t11\t-\t0\t1\tcmd-1\t{meta}",
            f"p3\t-\t-\t0\t0\t-\t{meta}",
            "../etc\t1\t0\t0\t0\t-\t{}",
            "p4\t1\t0\t0\t0\t-\tnot json",
        ]
    )
    records = {record.id: record for record in parse_listing(text)}
    assert sorted(records) == ["p1", "p2", "p3"]
    assert records["p1"].info(running=True).state is ProcessState.RUNNING
    assert records["p1"].vendor == "cmd-1"
    assert records["p2"].info(running=False).state is ProcessState.EXITED
    vanished = records["p3"].info(running=False)
    assert (vanished.state, vanished.exit_code) == (ProcessState.KILLED, None)


def test_ids_windows_and_slices() -> None:
    """Ids are shell- and path-safe; windows are validated; complete needs an earlier end."""
    for bad in ("", "../x", "a b", "A", "x;rm", "a/b", "-a"):
        with pytest.raises(ProcessNotFound):
            check_process_id(bad)
    assert check_process_id("p01-ab") == "p01-ab"
    with pytest.raises(InvalidInput):
        check_window(-1, None, 10)
    with pytest.raises(InvalidInput):
        check_window(0, 0, 10)
    assert (check_window(0, None, 10), check_window(5, 3, 10)) == (10, 3)
    assert output_slice(b"ab", since=2, size=4, ended=True).complete
    assert not output_slice(b"ab", since=1, size=4, ended=True).complete
    assert not output_slice(b"ab", since=2, size=4, ended=False).complete


async def test_the_reaper_kills_what_left_its_group() -> None:
    """A marked process that setsid-ed away from its parent's group still dies."""
    process = await asyncio.create_subprocess_exec(
        "setsid",
        "sleep",
        "30",
        env={**os.environ, **mark("reaper-test")},
    )
    try:
        assert kill_marked("reaper-test") >= 1
        assert await asyncio.wait_for(process.wait(), GUARD_SECONDS) != 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert kill_marked("reaper-test") == 0


def _states(pids: list[int]) -> set[bytes]:
    """The ``/proc`` state letter of each pid."""
    return {Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] for pid in pids}


def _stopping(pid: int) -> bool:
    """Stopped (``T``), or still in the kernel (``D``) with its SIGSTOP pending: it runs
    none of its own code before it stops (under heavy I/O a process stayed ``D`` for the
    whole bound once, in CI)."""
    state = _states([pid])
    if state == {b"T"}:
        return True
    status = Path(f"/proc/{pid}/status").read_text()
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return state == {b"D"} and bool(pending & (1 << (signal.SIGSTOP - 1)))


async def test_the_reaper_freezes_and_continues_a_marked_tree() -> None:
    """stop_marked stops the marked shell and the child it forks; continue_marked lets both
    go on (the shell then sees the file it waited for and ends)."""
    marker = "reaper-freeze"
    with tempfile.TemporaryDirectory() as scratch:
        line = (
            # Long enough never to end by itself within the guards (it ended once, a stopped
            # `sleep 30` on a starved CI machine); the finally's kill_marked ends it.
            f"sleep 600 & echo $! > {scratch}/child; "
            f"while [ ! -e {scratch}/go ]; do sleep 0.01; done"
        )
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", line, env={**os.environ, **mark(marker)}
        )
        try:
            child = Path(scratch) / "child"
            for _ in range(int(GUARD_SECONDS * 100)):  # a liveness bound, not a timing
                if child.exists() and child.read_text().strip():
                    break
                await asyncio.sleep(0.01)
            pids = [process.pid, int(child.read_text())]
            assert stop_marked(marker) >= 2
            # One still in the kernel (state D, its stop pending) stops on its way out.
            for _ in range(int(GUARD_SECONDS * 100)):  # a liveness bound, not a timing
                if _states(pids) == {b"T"}:
                    break
                await asyncio.sleep(0.01)
            assert all(_stopping(pid) for pid in pids), _states(pids)
            (Path(scratch) / "go").touch()
            assert continue_marked(marker) >= 2
            assert await asyncio.wait_for(process.wait(), GUARD_SECONDS) == 0
            assert b"T" not in _states(pids[1:])
        finally:
            kill_marked(marker)
            if process.returncode is None:
                process.kill()
                await process.wait()
