"""Streamed-write checks: ``write_stream`` moves any size in O(chunk) memory, atomically.

The streamed form of ``write_file`` takes an async iterator of chunks. It must
deliver them byte-exact however large the stream is (the source here is
generated on the fly, never held whole), without buffering it anywhere in
the process (the peak of traced Python allocations while it runs stays far
below the size written: the client, and a fake service running in the same
process, must both stream), refuse what ``write_file`` refuses before it
takes a chunk, and be atomic at the final name: a write whose source fails
midway leaves the old file as it was and no temporary behind.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio
import hashlib
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mango.provider import InvalidInput, PathEscapeError, PermanentError, Sandbox
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = ["STREAM_CHUNK", "STREAM_SIZE", "WriteStreamChecks", "generated"]

STREAM_SIZE = 64 * 1024 * 1024
"""Bytes the large streamed write sends (generated chunk by chunk)."""
STREAM_CHUNK = 1024 * 1024
"""Size of each generated chunk."""
PEAK_FRACTION = 4
"""The traced peak during the large write must stay below ``STREAM_SIZE / PEAK_FRACTION``."""


def _chunk(index: int, size: int) -> bytes:
    # SHAKE gives any length of deterministic, non-repeating bytes in one call.
    return hashlib.shake_128(index.to_bytes(8, "big")).digest(size)


async def generated(size: int, chunk: int = STREAM_CHUNK) -> AsyncIterator[bytes]:
    """``size`` deterministic bytes in chunks of ``chunk``, made as they are asked for."""
    index = 0
    while size > 0:
        piece = min(chunk, size)
        yield _chunk(index, piece)
        size -= piece
        index += 1


def generated_digest(size: int, chunk: int = STREAM_CHUNK) -> str:
    """The SHA-256 of what :func:`generated` yields for ``size`` and ``chunk``."""
    digest = hashlib.sha256()
    index = 0
    while size > 0:
        piece = min(chunk, size)
        digest.update(_chunk(index, piece))
        size -= piece
        index += 1
    return digest.hexdigest()


async def _streamed_digest(sandbox: Sandbox, path: str) -> tuple[int, str]:
    """The size and SHA-256 of ``path`` read through ``open_file`` (never held whole)."""
    digest, size = hashlib.sha256(), 0
    async with sandbox.open_file(path) as chunks:
        async for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


async def _broken(prefix: int) -> AsyncIterator[bytes]:
    """A source that yields ``prefix`` bytes, then fails."""
    async for chunk in generated(prefix):
        yield chunk
    raise RuntimeError("the source broke midway (injected by the check)")


async def _cancelled_midway(sandbox: Sandbox, path: str, prefix: int) -> BaseException | None:
    """Start ``write_stream``, cancel it once the source has yielded ``prefix`` bytes and waits.

    No clock: the source itself says when it has handed over its prefix and
    is blocked. Returns what the cancelled task ended with (``None``: it
    finished without noticing the cancellation).
    """
    waiting = asyncio.Event()
    never = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        async for chunk in generated(prefix):
            yield chunk
        waiting.set()
        await never.wait()
        yield b"never sent"

    task = asyncio.ensure_future(sandbox.write_stream(path, source()))
    waiter = asyncio.ensure_future(waiting.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task in done:
        return task.exception() if not task.cancelled() else asyncio.CancelledError()
    task.cancel()
    try:
        await task
    except BaseException as exc:  # noqa: BLE001 - the check inspects what it was
        return exc
    return None


class _Untouched:
    """An async iterable that records whether anyone started iterating it."""

    def __init__(self) -> None:
        self.started = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        self.started = True
        return generated(16)


class WriteStreamChecks:
    """``write_stream``: any size, bounded memory, the write rules, atomic at the final name."""

    def _listing(self, conformance: Harness, sandbox: Sandbox, directory: str) -> list[str]:
        listed = conformance.sh(sandbox, 'ls -A -- "$1"', directory)
        assert listed.exit_code == 0, listed.stderr[:200]
        return sorted(listed.stdout.decode().split())

    def test_write_stream_moves_a_large_stream_exactly(self, conformance: Harness) -> None:
        """64 MiB generated on the fly arrive byte-exact; the traced peak stays far below that."""
        sandbox = conformance.create()
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            baseline = tracemalloc.get_traced_memory()[0]
            conformance.run(
                sandbox.write_stream("big/streamed.bin", generated(STREAM_SIZE)), "write_stream"
            )
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            if started:
                tracemalloc.stop()
        assert peak < STREAM_SIZE // PEAK_FRACTION, (
            f"writing {STREAM_SIZE} bytes peaked at {peak} traced bytes: the stream was "
            "buffered somewhere (client or service)"
        )
        size, digest = conformance.run(_streamed_digest(sandbox, "big/streamed.bin"), "read back")
        assert (size, digest) == (STREAM_SIZE, generated_digest(STREAM_SIZE)), (
            "the streamed write did not arrive byte-exact"
        )
        assert self._listing(conformance, sandbox, "big") == ["streamed.bin"], (
            "a temporary was left beside the written file"
        )

    def test_write_stream_replaces_and_takes_any_chunks(self, conformance: Harness) -> None:
        """It replaces an existing file, makes parents, takes bytes-like and empty chunks."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("notes/old.txt", b"the old content, longer than new"))

        async def shapes() -> AsyncIterator[Any]:  # bytes-like chunks, as write_file takes
            yield b""
            yield b"new "
            yield bytearray(b"con")
            yield memoryview(b"tent")

        conformance.run(sandbox.write_stream("notes/old.txt", shapes()), "replace")
        assert conformance.run(sandbox.read_file("notes/old.txt")) == b"new content"
        conformance.run(sandbox.write_stream("deep/er/empty.bin", generated(0)), "empty")
        assert conformance.run(sandbox.read_file("deep/er/empty.bin")) == b""

    def test_failed_write_stream_keeps_the_old_file(self, conformance: Harness) -> None:
        """A source that fails after megabytes leaves the old file intact and nothing beside it."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("keep/data.bin", b"the old file"))
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the transport makes of it
            conformance.run(sandbox.write_stream("keep/data.bin", _broken(3 * STREAM_CHUNK)))
        assert conformance.run(sandbox.read_file("keep/data.bin")) == b"the old file", (
            "a write that failed midway changed the file under its final name"
        )
        assert self._listing(conformance, sandbox, "keep") == ["data.bin"], (
            "a failed streamed write left its temporary behind"
        )
        with pytest.raises(Exception):  # noqa: B017, PT011
            conformance.run(sandbox.write_stream("keep/fresh.bin", _broken(STREAM_CHUNK)))
        assert self._listing(conformance, sandbox, "keep") == ["data.bin"], (
            "a failed write of a new file left a file (or its temporary) behind"
        )

    def test_cancelled_write_stream_keeps_the_old_file(self, conformance: Harness) -> None:
        """Cancelling a write whose source waits after megabytes keeps the old file, no leftover."""
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("cancel/data.bin", b"the old file"))
        ended = conformance.run(
            _cancelled_midway(sandbox, "cancel/data.bin", 2 * STREAM_CHUNK), "cancel midway"
        )
        assert isinstance(ended, asyncio.CancelledError), (
            f"a cancelled write_stream must end cancelled, it ended with {ended!r}"
        )
        assert conformance.run(sandbox.read_file("cancel/data.bin")) == b"the old file", (
            "a cancelled write changed the file under its final name"
        )
        assert self._listing(conformance, sandbox, "cancel") == ["data.bin"], (
            "a cancelled streamed write left its temporary behind"
        )

    def test_write_stream_refuses_what_write_file_refuses(self, conformance: Harness) -> None:
        """Links, directories and escapes are refused before a chunk is taken; non-bytes too."""
        sandbox = conformance.create()
        made = conformance.sh(sandbox, "mkdir -p adir && ln -s /etc/passwd link && ln -s . up")
        assert made.exit_code == 0, made.stderr[:200]
        cases: list[tuple[str, type[BaseException]]] = [
            ("link", PathEscapeError),
            ("up/through.txt", PathEscapeError),
            ("adir", PermanentError),
            ("../escape.txt", PathEscapeError),
        ]
        for path, error in cases:
            source = _Untouched()
            with pytest.raises(error):
                conformance.run(sandbox.write_stream(path, source), f"write_stream({path!r})")
            assert not source.started, f"write_stream({path!r}) took chunks before refusing"

        async def text() -> AsyncIterator[Any]:
            yield b"fine"
            yield "not bytes"

        with pytest.raises(InvalidInput):
            conformance.run(sandbox.write_stream("typed.txt", text()), "a str chunk")
        left = conformance.sh(sandbox, "ls -A")
        assert b"typed" not in left.stdout, "a refused chunk left a file (or its temporary)"


mark_checks(WriteStreamChecks, pytest.mark.mango_gap)
