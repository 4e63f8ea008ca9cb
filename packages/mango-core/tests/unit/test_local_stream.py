"""Streaming exec on the local provider: early delivery, backpressure, early exit, parity."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.local import LocalProvider, LocalSandbox
from mango.provider import Command, ExecResult, OutputChunk, OutputStream, SandboxSpec
from mango.provider.output import collect
from mango_conformance.checks.streaming import assert_slow_consumer_bounded

MIB = 1024 * 1024
BIG_CAP = 16 * MIB
"""A cap far above the channel's window, so that only backpressure can bound the queue."""
TREE = 'sleep 300 & printf %s "$!" > child; printf %s "$$" > leader; printf ready; wait'
"""A leader and a sleeping child; writes their pids, then prints ``ready``."""


def sh(script: str, *args: str, **options: object) -> Command:
    return Command(("sh", "-c", script, "sh", *args), **options)  # type: ignore[arg-type]


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "sandboxes"
    pids = [pid for pid in _pids_in(tmp_path) if alive(pid)]
    for pid in pids:  # whatever a failing test left running is ours to stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pids_in(directory: Path) -> list[int]:
    return [
        int(path.read_text()) for path in directory.rglob("*") if path.name in {"leader", "child"}
    ]


SIGKILL_BIT = 1 << (signal.SIGKILL - 1)
PF_EXITING = 0x4
"""The kernel's per-task flag of a process in its exit path (``/proc/PID/stat``, field 9)."""


def alive(pid: int) -> bool:
    """True if ``pid`` exists and nothing has killed it yet.

    Dead means gone, a zombie, in its exit path (``PF_EXITING``), or with
    ``SIGKILL`` pending: a killed process that a loaded machine has not yet
    scheduled to run its exit keeps its state for a while after ``killpg``
    returns, but it cannot run another instruction of its own.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    if stat[0] in {"Z", "X"} or int(stat[6]) & PF_EXITING:
        return False
    pending = 0
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in {"SigPnd", "ShdPnd"}:
            pending |= int(value, 16)
    return not pending & SIGKILL_BIT


@pytest.fixture
async def sandbox(base: Path) -> LocalSandbox:
    return await LocalProvider(base).create("stream-session", SandboxSpec())


async def test_output_arrives_while_the_command_waits(sandbox: LocalSandbox) -> None:
    """The first chunks reach the consumer before the command may go on (a file gate)."""
    script = "printf early; printf warn >&2; while [ ! -e gate ]; do sleep 0.01; done; printf late"
    seen = {OutputStream.STDOUT: b"", OutputStream.STDERR: b""}
    async with sandbox.exec_stream(sh(script, timeout=60)) as events:
        async for event in events:
            if isinstance(event, ExecResult):
                final = event
                break
            seen[event.stream] += event.data
            if seen == {OutputStream.STDOUT: b"early", OutputStream.STDERR: b"warn"}:
                await sandbox.write_file("gate", b"")
    assert not final.timed_out, f"the gate was never opened; saw {seen}"
    assert (seen[OutputStream.STDOUT], final.exit_code) == (b"earlylate", 0)
    assert (final.stdout, final.stderr) == (b"", b"")


async def test_slow_consumer_holds_the_command_back(base: Path) -> None:
    """With a cap far above the window, a consumer that does not read holds the command back."""
    sandbox = await LocalProvider(base, max_output_bytes=BIG_CAP).create("slow", SandboxSpec())
    await assert_slow_consumer_bounded(sandbox, BIG_CAP)


async def test_leaving_early_kills_the_group(sandbox: LocalSandbox) -> None:
    """Breaking out of the stream kills the leader and its child before the block exits."""
    async with sandbox.exec_stream(sh(TREE)) as events:
        async for event in events:
            if isinstance(event, OutputChunk) and b"ready" in event.data:
                break
    root = Path(sandbox.root)
    for role in ("leader", "child"):
        pid = int((root / role).read_text())
        assert not alive(pid), f"the {role} survived leaving the stream"


async def test_cancelling_the_consumer_kills_the_group(sandbox: LocalSandbox) -> None:
    """A consumer task cancelled mid-stream raises CancelledError and takes the command down."""
    ready = asyncio.Event()

    async def consume() -> None:
        async with sandbox.exec_stream(sh(TREE)) as events:
            async for event in events:
                if isinstance(event, OutputChunk) and b"ready" in event.data:
                    ready.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(ready.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    root = Path(sandbox.root)
    assert not alive(int((root / "leader").read_text()))
    assert not alive(int((root / "child").read_text()))


@pytest.mark.parametrize(
    "command",
    [
        sh("printf out; printf err >&2; exit 7"),
        sh("head -c $((3 * 1048576)) /dev/zero; head -c $((3 * 1048576)) /dev/zero >&2"),
        sh("printf before; sleep 300", timeout=0.3),
        Command(("cat",), stdin=bytes(range(256)) * 64),
        Command(("no-such-program-anywhere",)),
    ],
    ids=["exit", "cap", "timeout", "stdin", "missing"],
)
async def test_stream_and_exec_agree(sandbox: LocalSandbox, command: Command) -> None:
    """The joined stream equals exec's result, bytes and flags."""
    buffered = await sandbox.exec(command)
    async with sandbox.exec_stream(command) as events:
        streamed = await collect(events)
    assert streamed == buffered


async def test_destroy_during_a_stream_ends_it_cancelled(sandbox: LocalSandbox) -> None:
    """Destroying the sandbox while a stream runs gives a final result with cancelled=True."""
    async with sandbox.exec_stream(sh("printf go; sleep 300")) as events:
        assert await anext(events) == OutputChunk(OutputStream.STDOUT, b"go")
        await sandbox.destroy()
        final = await collect(events)
    assert (final.cancelled, final.exit_code) == (True, -1)
