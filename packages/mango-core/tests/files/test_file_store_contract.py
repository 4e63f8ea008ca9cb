"""The FileStore contract, run on every adapter (filesystem and S3 on moto) with no fake.

A new store passes when it is added to ``STORE_KINDS`` in this directory's
conftest and this module stays green.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mango.domain import ContentMismatch, InvalidInput
from mango.domain.files import BlobInfo, FileStore
from mango.filestore import FileStoreSettings, open_file_store

MiB = 1024 * 1024
KEY = "ns1/files/file-0123456789abcdef0123456789abcdef"


async def chunks_of(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
        await asyncio.sleep(0)


async def read_all(store: FileStore, key: str, **expected: object) -> bytes:
    async with store.open(key, **expected) as chunks:  # type: ignore[arg-type]
        return b"".join([chunk async for chunk in chunks])


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def keys(store: FileStore, prefix: str = "") -> list[str]:
    return sorted([entry.key async for entry in store.scan(prefix)])


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("size", [0, 1, 70_000, 9 * MiB + 3])
async def test_put_then_open_returns_the_same_bytes(file_store: FileStore, size: int) -> None:
    """Bytes come back as they went in (empty, tiny, several chunks, several S3 parts)."""
    data = os.urandom(size)
    info = await file_store.put(KEY, chunks_of(data, 256 * 1024))
    assert BlobInfo(size, digest(data)) == info
    assert await read_all(file_store, KEY, size=size, sha256=info.sha256) == data
    assert await read_all(file_store, KEY) == data
    assert await keys(file_store) == [KEY]


async def test_put_checks_what_it_was_told(file_store: FileStore) -> None:
    """With the right size and digest a put succeeds and reports them."""
    data = b"announced" * 1000
    info = await file_store.put(KEY, chunks_of(data), size=len(data), sha256=digest(data))
    assert (info.size, info.sha256) == (len(data), digest(data))


async def test_put_replaces_a_blob_atomically(file_store: FileStore) -> None:
    """A second put under a key replaces the first blob whole."""
    await file_store.put(KEY, chunks_of(b"old" * 100))
    await file_store.put(KEY, chunks_of(b"new!" * 10))
    assert await read_all(file_store, KEY) == b"new!" * 10


# ------------------------------------------------------------------ failed puts publish nothing


async def test_too_many_bytes_fail_at_once_and_publish_nothing(file_store: FileStore) -> None:
    """Past the announced size the put stops reading and raises; no blob appears."""
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * MiB

    with pytest.raises(ContentMismatch) as caught:
        await file_store.put(KEY, endless(), size=3 * MiB)
    assert caught.value.expected_size == 3 * MiB
    assert pulled <= 4 + 2  # the chunk past the size, and what a store reads ahead
    with pytest.raises(FileNotFoundError):
        await read_all(file_store, KEY)
    assert await keys(file_store) == []


@pytest.mark.parametrize("wrong", ["short", "digest"])
async def test_a_mismatch_leaves_the_previous_blob(file_store: FileStore, wrong: str) -> None:
    """Too few bytes or another digest raise ContentMismatch; the old blob stays as it was."""
    await file_store.put(KEY, chunks_of(b"previous"))
    data = os.urandom(200_000)
    expected = (
        {"size": len(data) + 1} if wrong == "short" else {"sha256": digest(b"something else")}
    )
    with pytest.raises(ContentMismatch) as caught:
        await file_store.put(KEY, chunks_of(data), **expected)  # type: ignore[arg-type]
    assert caught.value.size == len(data)
    assert await read_all(file_store, KEY) == b"previous"
    assert await keys(file_store) == [KEY]


async def test_an_error_in_the_source_propagates_and_publishes_nothing(
    file_store: FileStore,
) -> None:
    """The iterator's own error comes out unchanged, after some bytes were stored."""

    async def failing() -> AsyncIterator[bytes]:
        yield b"a" * (6 * MiB)
        raise OSError(5, "source device failed")

    with pytest.raises(OSError, match="source device failed"):
        await file_store.put(KEY, failing())
    assert await keys(file_store) == []


async def test_a_cancelled_put_publishes_nothing(file_store: FileStore) -> None:
    """Cancelling the task mid-stream leaves no blob."""
    started = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"b" * MiB
        started.set()
        await asyncio.Event().wait()  # never set: the put is cancelled here
        yield b""  # pragma: no cover

    task = asyncio.create_task(file_store.put(KEY, slow()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await keys(file_store) == []


# ------------------------------------------------------------------ reads verify


async def test_opening_a_missing_blob_is_file_not_found(file_store: FileStore) -> None:
    """No blob under the key: FileNotFoundError on entry."""
    with pytest.raises(FileNotFoundError):
        await read_all(file_store, KEY)


async def test_a_blob_changed_in_the_backend_fails_verification(
    file_store: FileStore, tamper: Callable[[str, bytes], Awaitable[None]]
) -> None:
    """Other bytes of the same size fail the digest; a shorter blob fails the size."""
    data = os.urandom(100_000)
    info = await file_store.put(KEY, chunks_of(data))
    await tamper(KEY, bytes(reversed(data)))
    with pytest.raises(ContentMismatch) as caught:
        await read_all(file_store, KEY, size=info.size, sha256=info.sha256)
    assert (caught.value.expected_sha256, caught.value.size) == (info.sha256, len(data))
    await tamper(KEY, data[:-1])
    with pytest.raises(ContentMismatch, match="99999 bytes, 100000 expected"):
        await read_all(file_store, KEY, size=info.size, sha256=info.sha256)


async def test_a_longer_blob_fails_before_the_surplus_is_passed_on(
    file_store: FileStore, tamper: Callable[[str, bytes], Awaitable[None]]
) -> None:
    """A blob that grew raises before any byte past the recorded size reaches the reader."""
    data = b"z" * (3 * MiB)
    info = await file_store.put(KEY, chunks_of(data))
    await tamper(KEY, data + b"tail" * MiB)
    received = 0

    async def consume() -> None:
        nonlocal received
        async with file_store.open(KEY, size=info.size, sha256=info.sha256) as chunks:
            async for chunk in chunks:
                received += len(chunk)

    with pytest.raises(ContentMismatch, match="more than the"):
        await consume()
    assert received <= info.size


# ------------------------------------------------------------------ delete, scan, keys


async def test_delete_is_idempotent(file_store: FileStore) -> None:
    """Deleting reports whether a blob was there; afterwards it is gone."""
    await file_store.put(KEY, chunks_of(b"doomed"))
    assert await file_store.delete(KEY) is True
    assert await file_store.delete(KEY) is False
    with pytest.raises(FileNotFoundError):
        await read_all(file_store, KEY)


async def test_scan_lists_blobs_below_a_prefix_only(file_store: FileStore) -> None:
    """Scanning a prefix lists its blobs with their sizes, and no other namespace's."""
    mine = [f"ns1/files/file-{n:032x}" for n in range(3)]
    theirs = "ns2/files/file-" + "f" * 32
    for index, key in enumerate([*mine, theirs]):
        await file_store.put(key, chunks_of(b"q" * index))
    entries = {entry.key: entry.size async for entry in file_store.scan("ns1/files/")}
    assert {key: index for index, key in enumerate(mine)} == entries
    assert await keys(file_store, "ns2/") == [theirs]
    assert await keys(file_store, "ns3/") == []
    assert await file_store.discard_incomplete(timedelta(0)) == 0
    assert len(await keys(file_store)) == 4


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", ".hidden", "a/.incoming", "a b"])
async def test_malformed_keys_are_invalid_input(file_store: FileStore, key: str) -> None:
    """A key that is not '/'-separated safe segments is refused before any I/O."""
    with pytest.raises(InvalidInput):
        await file_store.put(key, chunks_of(b"x"))
    with pytest.raises(InvalidInput):
        await read_all(file_store, key)
    with pytest.raises(InvalidInput):
        await file_store.delete(key)


def test_location_names_no_credential(file_store: FileStore, aws_env: dict[str, str]) -> None:
    """The location shown in messages never carries a secret."""
    assert aws_env["AWS_SECRET_ACCESS_KEY"] not in file_store.location
    assert file_store.location.startswith(("/", "s3://"))


async def test_the_filesystem_store_keeps_puts_in_progress_out_of_sight(
    tmp_path: Path,
) -> None:
    """While a put streams, its bytes are in .incoming, never under the key or in a scan."""
    from mango.filestore import FilesystemFileStore

    store = FilesystemFileStore(tmp_path / "root")
    gate = asyncio.Event()
    written = asyncio.Event()

    async def gated() -> AsyncIterator[bytes]:
        yield b"partial" * 1000
        written.set()
        await gate.wait()
        yield b"rest"

    task = asyncio.create_task(store.put(KEY, gated()))
    await written.wait()  # set once the put asked for more: the first chunk is written
    (incoming,) = (tmp_path / "root" / ".incoming").iterdir()
    assert incoming.stat().st_size == 7000
    assert not (tmp_path / "root" / KEY).exists()
    assert await keys(store) == []
    gate.set()
    info = await task
    assert info.size == 7004
    assert list((tmp_path / "root" / ".incoming").iterdir()) == []
    assert (tmp_path / "root" / KEY).stat().st_mode & 0o777 == 0o444


# ------------------------------------------------------------------ threads


class _WatchedLoop(asyncio.SelectorEventLoop):
    """Records every thread that hands work to the loop from outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.callers: list[threading.Thread] = []

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> asyncio.Handle:
        self.callers.append(threading.current_thread())
        return super().call_soon_threadsafe(*args, **kwargs)


def test_only_threads_python_started_run_python_for_the_store(
    file_store_settings: FileStoreSettings,
) -> None:
    """No native thread takes the GIL for a put, read, scan or delete.

    A thread Python did not start (obstore's tokio threads completing an
    ``*_async`` call) can still hold the GIL when a short program exits; on
    CPython 3.11 to 3.13 that aborts the process ("Fatal Python error:
    PyGILState_Release"). Such a thread shows here as a ``_DummyThread``.
    """

    async def every_operation() -> None:
        store = open_file_store(file_store_settings)
        try:
            await store.put(KEY, chunks_of(os.urandom(300_000)))
            assert len(await read_all(store, KEY)) == 300_000
            assert await keys(store) == [KEY]
            assert await store.delete(KEY)
        finally:
            await store.aclose()

    with asyncio.Runner(loop_factory=_WatchedLoop) as runner:
        runner.run(every_operation())
        loop = runner.get_loop()
        assert isinstance(loop, _WatchedLoop)
        foreign = [t for t in loop.callers if isinstance(t, threading._DummyThread)]
    assert loop.callers  # the watch works: worker threads report back through it
    assert foreign == []
