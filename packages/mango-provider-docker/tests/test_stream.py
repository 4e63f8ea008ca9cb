"""Streaming exec in a Docker sandbox: early delivery, backpressure, early exit, parity."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mango.provider import ExecResult, OutputChunk, OutputStream, SandboxSpec
from mango.provider.output import DEFAULT_WINDOW_BYTES, ExecChannel, collect
from mango_provider_docker import DEFAULT_MAX_OUTPUT_BYTES, DockerSandbox, Engine

from .conftest import make_provider
from .helpers import all_gone, eventually, sh, wait_for_file

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
BIG_CAP = 16 * MIB
"""A cap far above the channel's window, so that only backpressure can bound the queue."""
TREE = 'sleep 300 & printf %s "$!" > "$1.child"; printf %s "$$" > "$1.leader"; printf ready; wait'
"""A leader and a sleeping child; writes their pids, then prints ``ready``."""
FLOOD_WITH_PROGRESS = (
    'i=0; while [ "$i" -lt "$1" ]; do head -c 1048576 /dev/zero; i=$((i + 1)); '
    'echo "$i" > progress; done'
)
"""Print ``$1`` MiB, recording after each MiB how many have been written."""


async def test_output_arrives_while_the_command_waits(sandbox: DockerSandbox) -> None:
    """The first chunks reach the consumer before the command may go on (a file gate)."""
    script = (
        "printf early; printf warn >&2; "
        "while [ ! -e gate ]; do sleep 0.05; done; printf late; exit 5"
    )
    seen: dict[OutputStream, bytes] = {OutputStream.STDOUT: b"", OutputStream.STDERR: b""}
    async with sandbox.exec_stream(sh(script, timeout=60)) as events:
        async for event in events:
            if isinstance(event, ExecResult):
                final = event
                break
            seen[event.stream] += event.data
            if seen == {OutputStream.STDOUT: b"early", OutputStream.STDERR: b"warn"}:
                await sandbox.write_file("gate", b"")
    assert not final.timed_out, f"the gate was never opened; saw {seen}"
    assert (seen[OutputStream.STDOUT], final.exit_code) == (b"earlylate", 5)
    assert (final.stdout, final.stderr) == (b"", b"")


async def test_slow_consumer_holds_the_command_back(
    docker_engine: Engine, test_image: str, resource_dir: Path, session_key: str
) -> None:
    """With a cap far above the window, a consumer that does not read holds the command back."""
    provider = make_provider(resource_dir, test_image, max_output_bytes=BIG_CAP)
    try:
        sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
        try:
            await _slow_consumer(sandbox)
        finally:
            await sandbox.destroy()
    finally:
        await provider.aclose()


async def _slow_consumer(sandbox: DockerSandbox) -> None:
    blocks = 2 * BIG_CAP // MIB
    async with sandbox.exec_stream(sh(FLOOD_WITH_PROGRESS, str(blocks), timeout=120)) as events:
        assert isinstance(events, ExecChannel)
        first = await anext(events)
        assert isinstance(first, OutputChunk)
        # Without backpressure the command would print everything into the queue (up to
        # the 16 MiB cap) while we do not read; the bound below only ends the wait.
        peak = 0
        for _ in range(60):
            peak = max(peak, events.queued_bytes)
            assert peak <= DEFAULT_WINDOW_BYTES + MIB, f"{peak} bytes queued for a slow reader"
            if await _progress(sandbox) >= blocks:
                break
            await asyncio.sleep(0.05)
        result = await collect(events)
    assert len(first.data) + len(result.stdout) == BIG_CAP
    assert result.stdout_truncated
    assert result.exit_code == 0


async def _progress(sandbox: DockerSandbox) -> int:
    try:
        return int(await sandbox.read_file("progress") or b"0")
    except (FileNotFoundError, ValueError):
        return 0


async def test_leaving_early_kills_the_tree(sandbox: DockerSandbox) -> None:
    """Breaking out of the stream kills the leader and its child; the sandbox stays usable."""
    async with sandbox.exec_stream(sh(TREE, "t")) as events:
        async for event in events:
            if isinstance(event, OutputChunk) and b"ready" in event.data:
                break
    await wait_for_file(sandbox, "t.leader")
    await eventually(lambda: all_gone(sandbox, "t.leader", "t.child"), 10.0, "the tree dying")
    assert (await sandbox.exec(sh("printf usable"))).stdout == b"usable"


async def test_stream_and_exec_agree_past_the_cap(sandbox: DockerSandbox) -> None:
    """Flooding both streams: the joined stream equals exec's result exactly."""
    flood = sh(
        "head -c $((3 * $1)) /dev/zero | tr '\\0' a; head -c $((3 * $1)) /dev/zero >&2; exit 3",
        str(DEFAULT_MAX_OUTPUT_BYTES),
    )
    buffered = await sandbox.exec(flood)
    async with sandbox.exec_stream(flood) as events:
        streamed = await collect(events)
    assert streamed == buffered
    assert buffered.stdout == b"a" * DEFAULT_MAX_OUTPUT_BYTES
    assert buffered.stderr == bytes(DEFAULT_MAX_OUTPUT_BYTES)
    assert (buffered.stdout_truncated, buffered.stderr_truncated) == (True, True)
    assert buffered.exit_code == 3


async def test_destroy_during_a_stream_ends_it_cancelled(sandbox: DockerSandbox) -> None:
    """Destroying the sandbox while a stream runs gives a final result with cancelled=True."""
    async with sandbox.exec_stream(sh("printf go; sleep 300")) as events:
        first = await anext(events)
        assert first == OutputChunk(OutputStream.STDOUT, b"go")
        await sandbox.destroy()
        final = await collect(events)
    assert final.cancelled
    assert final.exit_code == -1
