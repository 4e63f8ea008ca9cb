"""Background processes on the fake E2B: what the conformance group cannot see from outside.

The known peer defect (a ``Connect`` that E2B's edge ends after two
minutes) is played by the fake's ``connect_deadline``; a process that envd
forgot without an exit status (a cold boot) reads killed, with no exit code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.provider import Command, ProcessState
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.fake import E2BFakeService, FakeConfig

from .conftest import SPEC, make_provider

GUARD_SECONDS = 20.0
"""A liveness bound: the awaited call must end by itself long before it (never a timing)."""


@pytest.fixture
async def edgy(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A fake whose edge cuts every ``Connect`` stream after 0.2 s."""
    async with E2BFakeService.create(tmp_path / "edgy", FakeConfig(connect_deadline=0.2)) as fake:
        yield fake


async def test_a_wait_outlives_connect_streams_the_edge_cuts(
    edgy: E2BFakeService, session_key: str
) -> None:
    """wait() reconnects after each cut stream and returns the exit that came after them."""
    provider = make_provider(edgy)
    try:
        sandbox = await provider.create(session_key, SPEC)
        handle = await sandbox.start(Command(("sh", "-c", 'read -r x; printf "got %s\\n" "$x"')))
        waiting = asyncio.ensure_future(sandbox.wait(handle.id))
        assert await edgy.wait_until(lambda: edgy.cut_streams >= 2, timeout=GUARD_SECONDS)
        assert not waiting.done(), f"the wait ended with a cut stream: {waiting}"
        await sandbox.send_stdin(handle.id, b"abc\n")
        info = await asyncio.wait_for(waiting, GUARD_SECONDS)
        assert (info.state, info.exit_code) == (ProcessState.EXITED, 0)
        output = await sandbox.logs(handle.id)
        assert (output.data, output.complete) == (b"got abc\n", True)
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_a_long_log_is_read_in_bounded_pieces(
    provider: E2BProvider, session_key: str
) -> None:
    """Reads of max_bytes each give back the whole log, byte for byte, then complete."""
    sandbox = await provider.create(session_key, SPEC)
    try:
        script = "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"
        handle = await sandbox.start(Command(("sh", "-c", script)))
        assert (await sandbox.wait(handle.id, timeout=GUARD_SECONDS)).state is ProcessState.EXITED
        expected = b"".join(f"line-{i}\n".encode() for i in range(3000))
        pieces, since, complete = [], 0, False
        while not complete:
            output = await sandbox.logs(handle.id, since=since, max_bytes=4096)
            assert output.offset == since
            assert len(output.data) <= 4096
            pieces.append(output.data)
            since, complete = output.next_offset, output.complete
        assert b"".join(pieces) == expected
        assert len(pieces) == -(-len(expected) // 4096)
        past = await sandbox.logs(handle.id, since=len(expected) + 10)
        assert (past.data, past.offset, past.complete) == (b"", len(expected) + 10, True)
    finally:
        await sandbox.destroy()


async def test_a_process_lost_in_a_cold_boot_reads_killed_without_a_code(
    fake: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """A filesystem-only pause kills the processes; their files stay: KILLED, no exit code."""
    sandbox = await provider.create(session_key, SPEC)
    try:
        handle = await sandbox.start(Command(("sh", "-c", "echo up; exec cat")))
        fake.pause_sandbox(sandbox.ref.external_id, memory=False)
        await sandbox.keep_alive()  # as an acquire does: the sandbox boots again, cold
        listed = {info.id: info for info in await sandbox.processes()}
        assert fake.cold_boots(sandbox.ref.external_id) == 1
        info = listed[handle.id]
        assert (info.state, info.exit_code) == (ProcessState.KILLED, None)
        assert (await sandbox.logs(handle.id)).complete
    finally:
        await sandbox.destroy()
