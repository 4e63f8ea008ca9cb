"""Streaming exec in a Docker sandbox: backpressure, early exit, parity, destroy.

Early delivery and the parity scenarios run in the conformance suite too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.provider import OutputChunk, OutputStream, SandboxSpec
from mango.provider.output import collect
from mango_conformance.checks.streaming import assert_slow_consumer_bounded
from mango_provider_docker import DEFAULT_MAX_OUTPUT_BYTES, DockerSandbox, Engine

from .conftest import make_provider
from .helpers import all_gone, eventually, sh, wait_for_file

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
BIG_CAP = 16 * MIB
"""A cap far above the channel's window, so that only backpressure can bound the queue."""
TREE = 'sleep 300 & printf %s "$!" > "$1.child"; printf %s "$$" > "$1.leader"; printf ready; wait'
"""A leader and a sleeping child; writes their pids, then prints ``ready``."""


async def test_slow_consumer_holds_the_command_back(
    docker_engine: Engine, test_image: str, resource_dir: Path, session_key: str
) -> None:
    """With a cap far above the window, a consumer that does not read holds the command back."""
    provider = make_provider(resource_dir, test_image, max_output_bytes=BIG_CAP)
    try:
        sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
        try:
            await assert_slow_consumer_bounded(sandbox, BIG_CAP)
        finally:
            await sandbox.destroy()
    finally:
        await provider.aclose()


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
