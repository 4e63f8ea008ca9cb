"""Reads bounded at the source: the kit's helpers, the read cap setting, the local provider."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from mango.config import DEFAULT_MAX_READ_BYTES, max_read_bytes
from mango.domain.errors import (
    ConfigurationError,
    FileTooLarge,
    InvalidInput,
    PathEscapeError,
    PermanentError,
)
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider, LocalSandbox
from mango.local.settings import read_local_settings
from mango.provider.reads import (
    BoundedBuffer,
    ThreadedChunks,
    check_size,
    collect_bounded,
    read_limit,
)

GIB = 1024 * 1024 * 1024


@pytest.fixture
async def sandbox(tmp_path: Path) -> LocalSandbox:
    return await LocalProvider(tmp_path / "sandboxes").create("reads", SandboxSpec())


def sparse(sandbox: LocalSandbox, name: str, size: int) -> Path:
    """A sparse file of ``size`` bytes in the workspace (it costs no disk)."""
    path = Path(sandbox.root) / name
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def open_fds() -> int:
    """How many descriptors this process has open."""
    return len(list(Path("/proc/self/fd").iterdir()))


# ---------------------------------------------------------------- the kit


def test_read_limit_takes_the_callers_bound_or_the_cap() -> None:
    """None means the cap; a positive int is the bound; anything else is InvalidInput."""
    assert read_limit(None, 100) == 100
    assert read_limit(7, 100) == 7
    assert read_limit(1000, 100) == 1000
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(InvalidInput):
            read_limit(bad, 100)  # type: ignore[arg-type]


def test_check_size_raises_with_size_and_limit() -> None:
    """A reported size past the bound is FileTooLarge carrying both numbers; None is unknown."""
    check_size("a", 10, 10)
    check_size("a", None, 10)
    with pytest.raises(FileTooLarge) as caught:
        check_size("a", 11, 10)
    assert (caught.value.size, caught.value.limit) == (11, 10)
    assert caught.value.hint is not None
    assert "open_file" in caught.value.hint


def test_bounded_buffer_stops_one_chunk_past_the_bound() -> None:
    """The buffer keeps up to the bound and raises on the chunk that passes it."""
    buffer = BoundedBuffer("f", 10)
    buffer.add(b"12345")
    assert buffer.remaining == 5
    buffer.add(b"67890")
    assert buffer.getvalue() == b"1234567890"
    with pytest.raises(FileTooLarge) as caught:
        buffer.add(b"x")
    assert (caught.value.size, caught.value.limit) == (11, 10)


async def test_collect_bounded_stops_reading_past_the_bound() -> None:
    """A stream that never ends (a growing file) is read only until it passes the bound."""
    pulled = 0

    async def endless() -> object:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 1000

    with pytest.raises(FileTooLarge) as caught:
        await collect_bounded(endless(), 4500, path="grows.log")  # type: ignore[arg-type]
    assert (caught.value.size, caught.value.limit, pulled) == (5000, 4500, 5)
    assert await collect_bounded(_chunks(b"ab", b"cd"), 4, path="f") == b"abcd"


async def _chunks(*items: bytes) -> object:
    for item in items:
        yield item


async def test_threaded_chunks_waits_for_a_read_in_flight() -> None:
    """A consumer cancelled mid-read leaves the read to finish before aclose returns."""
    started, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    finished: list[bool] = []

    def slow_read() -> bytes:
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(10)
        finished.append(True)
        return b"late"

    chunks = ThreadedChunks(slow_read)
    reader = asyncio.ensure_future(chunks.__anext__())
    await asyncio.wait_for(started.wait(), 10)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    closing = asyncio.ensure_future(chunks.aclose())
    await asyncio.sleep(0)
    assert not closing.done()
    release.set()
    await asyncio.wait_for(closing, 10)
    assert finished == [True]
    with pytest.raises(StopAsyncIteration):
        await chunks.__anext__()


# ---------------------------------------------------------------- the setting


def test_read_cap_setting_has_a_default_and_a_range() -> None:
    """MANGO_MAX_READ_BYTES: 16 MiB by default, 1 byte to 1 GiB, anything else refused."""
    assert max_read_bytes({}) == DEFAULT_MAX_READ_BYTES == 16 * 1024 * 1024
    assert max_read_bytes({"MANGO_MAX_READ_BYTES": "4096"}) == 4096
    for bad in ("0", "-5", str(GIB + 1), "1e3", "lots"):
        with pytest.raises(ConfigurationError, match="MANGO_MAX_READ_BYTES"):
            max_read_bytes({"MANGO_MAX_READ_BYTES": bad})


async def test_local_provider_reads_the_cap_from_its_settings(tmp_path: Path) -> None:
    """The registration's settings carry the cap into the provider and its sandboxes."""
    settings = read_local_settings(
        {"MANGO_LOCAL_SANDBOX_DIR": str(tmp_path), "MANGO_MAX_READ_BYTES": "8"}
    )
    assert settings.max_read_bytes == 8
    provider = LocalProvider(tmp_path, max_read_bytes=settings.max_read_bytes)
    sandbox = await provider.create("capped", SandboxSpec())
    await sandbox.write_file("nine.txt", b"123456789")
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("nine.txt")
    assert (caught.value.size, caught.value.limit) == (9, 8)
    assert await sandbox.read_file("nine.txt", max_bytes=9) == b"123456789"
    with pytest.raises(InvalidInput):
        LocalProvider(tmp_path, max_read_bytes=0)


# ---------------------------------------------------------------- the local provider


async def test_an_8gib_sparse_file_fails_at_once(sandbox: LocalSandbox) -> None:
    """The default bound refuses an 8 GiB sparse file by its size, before reading a byte."""
    sparse(sandbox, "huge.bin", 8 * GIB)
    started = time.monotonic()
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("huge.bin")
    assert (caught.value.size, caught.value.limit) == (8 * GIB, DEFAULT_MAX_READ_BYTES)
    assert time.monotonic() - started < 2.0


async def test_read_within_the_bound_is_exact(sandbox: LocalSandbox) -> None:
    """A file at the bound reads whole; read_file checks its argument."""
    data = os.urandom(3 * 1024 * 1024 + 5)
    await sandbox.write_file("d.bin", data)
    assert await sandbox.read_file("d.bin", max_bytes=len(data)) == data
    with pytest.raises(FileTooLarge):
        await sandbox.read_file("d.bin", max_bytes=len(data) - 1)
    with pytest.raises(InvalidInput):
        await sandbox.read_file("d.bin", max_bytes=0)


async def test_open_file_streams_a_sparse_file_in_bounded_chunks(sandbox: LocalSandbox) -> None:
    """open_file yields a 64 MiB file in chunks of at most 1 MiB, and closes what it opened."""
    sparse(sandbox, "big.bin", 64 * 1024 * 1024)
    before = open_fds()
    total, largest = 0, 0
    async with sandbox.open_file("big.bin") as chunks:
        async for chunk in chunks:
            total += len(chunk)
            largest = max(largest, len(chunk))
    assert (total, largest) == (64 * 1024 * 1024, 1024 * 1024)
    assert open_fds() == before


async def test_open_file_left_early_or_cancelled_closes_the_file(sandbox: LocalSandbox) -> None:
    """Leaving the block after one chunk, or cancelling the reader, leaks no descriptor."""
    sparse(sandbox, "big.bin", 64 * 1024 * 1024)
    before = open_fds()
    async with sandbox.open_file("big.bin") as chunks:
        async for _ in chunks:
            break
    assert open_fds() == before

    entered = asyncio.Event()

    async def reader() -> None:
        async with sandbox.open_file("big.bin") as chunks:
            entered.set()
            async for _ in chunks:
                await asyncio.sleep(0)

    task = asyncio.ensure_future(reader())
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert open_fds() == before


async def test_open_file_refuses_on_entry(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """Missing files, directories, symlinks and escapes fail when the block is entered."""
    result = await sandbox.exec(Command(("sh", "-c", "mkdir d && ln -s /etc/passwd link")))
    assert result.exit_code == 0
    cases: list[tuple[str, type[BaseException]]] = [
        ("missing", FileNotFoundError),
        ("d", PermanentError),
        ("link", PathEscapeError),
        ("../x", PathEscapeError),
    ]
    for path, error in cases:
        with pytest.raises(error):
            async with sandbox.open_file(path):
                pytest.fail("entered")
