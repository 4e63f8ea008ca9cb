"""StoredFiles on real PostgreSQL and each real store: two phases, verified reads, reconcile."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from mango.app.files import StoredFiles
from mango.domain import (
    ContentMismatch,
    FileState,
    FileStore,
    FileStoreUnavailable,
    InvalidInput,
    PreconditionFailed,
    ResourceConflict,
    SessionDeleting,
    StoredFileNotFound,
    StoredFileNotReady,
)
from mango.domain.files import NewFile, file_blob_key, file_blob_prefix, new_file_id
from mango.filestore.s3 import S3FileStore
from mango.postgres import PostgresBindingStore, PostgresFileCatalog

from .conftest import AWS_TEST_ENV

pytestmark = pytest.mark.postgres

NS = "ns-test"


@pytest.fixture
async def files(store: PostgresBindingStore, file_store: FileStore) -> StoredFiles:
    """StoredFiles on the test's database and a store of each kind."""
    return StoredFiles(PostgresFileCatalog(store.pool), file_store, NS)


async def chunks_of(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read_all(files: StoredFiles, file_id: str) -> bytes:
    async with files.open(file_id) as chunks:
        return b"".join([chunk async for chunk in chunks])


def names(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


async def rows(url: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT id, state, blob_key FROM mango_files ORDER BY id")
        return await cursor.fetchall()


async def blob_keys(files: StoredFiles) -> list[str]:
    return sorted([entry.key async for entry in files.blobs.scan("")])


# ------------------------------------------------------------------ the round trip


async def test_put_list_open_download_delete(files: StoredFiles, tmp_path: Path) -> None:
    """A stored file comes back byte for byte, is listed while it exists, then is gone."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    work = tmp_path / "work"
    work.mkdir()
    source = work / "report.pdf"
    source.write_bytes(data)
    stored = await files.put_path(source)
    assert (stored.state, stored.filename, stored.mime_type) == (
        FileState.READY,
        "report.pdf",
        "application/pdf",
    )
    assert (stored.size, stored.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert stored.blob_key == file_blob_key(NS, stored.file_id)
    assert [f.file_id for f in await files.list_files()] == [stored.file_id]
    assert await read_all(files, stored.file_id) == data
    copy = work / "copy.pdf"
    assert (await files.download(stored.file_id, copy)).file_id == stored.file_id
    assert copy.read_bytes() == data
    assert names(work) == {"report.pdf", "copy.pdf"}  # no temporary file left

    await files.delete(stored.file_id)
    assert await files.list_files() == []
    assert await blob_keys(files) == []
    with pytest.raises(StoredFileNotFound):
        await files.get(stored.file_id)
    with pytest.raises(StoredFileNotFound):
        await files.delete(stored.file_id)


async def test_name_and_type_can_be_given(files: StoredFiles) -> None:
    """put takes a name, a MIME type, and a size and digest to check."""
    data = b"col1,col2\n"
    stored = await files.put(
        chunks_of(data),
        filename="data.csv",
        mime_type="text/csv; charset=utf-8",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    assert (stored.filename, stored.mime_type) == ("data.csv", "text/csv; charset=utf-8")
    with pytest.raises(InvalidInput, match="must be a name, not a path"):
        await files.put(chunks_of(data), filename="a/b.csv")
    with pytest.raises(InvalidInput, match="not a MIME type"):
        await files.put(chunks_of(data), filename="x", mime_type="nonsense")
    assert len(await files.list_files()) == 1


# ------------------------------------------------------------------ two phases


async def test_an_upload_is_invisible_until_verified(files: StoredFiles, database_url: str) -> None:
    """While the bytes stream the row is 'uploading': not listed, not readable, not removable."""
    gate = asyncio.Event()
    halfway = asyncio.Event()

    async def gated() -> AsyncIterator[bytes]:
        yield b"first half "
        halfway.set()
        await gate.wait()
        yield b"second half"

    upload = asyncio.create_task(files.put(gated(), filename="slow.txt"))
    await halfway.wait()
    ((file_id, state, _),) = await rows(database_url)
    assert state == "uploading"
    assert await files.list_files() == []
    with pytest.raises(StoredFileNotReady, match="still uploading"):
        await files.get(str(file_id))
    with pytest.raises(StoredFileNotReady):
        await read_all(files, str(file_id))
    with pytest.raises(StoredFileNotReady):
        await files.delete(str(file_id))
    gate.set()
    stored = await upload
    assert stored.file_id == file_id
    assert await read_all(files, stored.file_id) == b"first half second half"


@pytest.mark.parametrize("failure", ["mismatch", "source", "cancel"])
async def test_a_failed_upload_leaves_no_row_and_no_blob(
    files: StoredFiles, database_url: str, failure: str
) -> None:
    """A size mismatch, a failing source or a cancellation removes the row and any blob."""
    started = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        yield b"x" * (6 * 1024 * 1024)
        started.set()
        if failure == "source":
            raise OSError(5, "disk went away")
        if failure == "cancel":
            await asyncio.Event().wait()
        yield b"tail"

    upload = asyncio.create_task(
        files.put(source(), filename="f.bin", size=10 if failure == "mismatch" else None)
    )
    if failure == "cancel":
        await started.wait()
        upload.cancel()
    expected = {
        "mismatch": ContentMismatch,
        "source": OSError,
        "cancel": asyncio.CancelledError,
    }[failure]
    with pytest.raises(expected):
        await upload
    assert await rows(database_url) == []
    assert await blob_keys(files) == []


async def test_a_stalled_upload_given_up_by_the_reconciler_never_becomes_ready(
    store: PostgresBindingStore, file_store: FileStore, database_url: str
) -> None:
    """The reconciler abandons an upload; its uploader learns it on its next heartbeat."""
    files = StoredFiles(PostgresFileCatalog(store.pool), file_store, NS, heartbeat=0)
    gate = asyncio.Event()
    halfway = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"part"
        halfway.set()
        await gate.wait()
        yield b"more"
        yield b"end"

    upload = asyncio.create_task(files.put(stalled(), filename="stalled.bin"))
    await halfway.wait()
    fresh = await files.reconcile(stale_after=timedelta(hours=1))
    assert fresh.abandoned_uploads == 0  # it was touched just now
    report = await files.reconcile(stale_after=timedelta(0))
    assert (report.abandoned_uploads, report.removed_files) == (1, 1)
    gate.set()
    with pytest.raises(PreconditionFailed, match="abandoned"):
        await upload
    assert await rows(database_url) == []
    assert await blob_keys(files) == []


# ------------------------------------------------------------------ verified reads


async def test_a_damaged_blob_is_never_served_as_whole(
    files: StoredFiles, tamper: Callable[[str, bytes], Awaitable[None]], tmp_path: Path
) -> None:
    """Other bytes in the backend: open raises, download keeps the old destination file."""
    data = os.urandom(500_000)
    stored = await files.put(chunks_of(data), filename="d.bin")
    await tamper(stored.blob_key, data[::-1])
    with pytest.raises(ContentMismatch, match=f"stored file '{stored.file_id}' is damaged") as e:
        await read_all(files, stored.file_id)
    assert e.value.hint is not None
    assert "mango store rm" in e.value.hint
    work = tmp_path / "work"
    work.mkdir()
    destination = work / "keep.bin"
    destination.write_bytes(b"previous content")
    with pytest.raises(ContentMismatch):
        await files.download(stored.file_id, destination)
    assert destination.read_bytes() == b"previous content"
    assert names(work) == {"keep.bin"}
    await tamper(stored.blob_key, data + b"!")
    with pytest.raises(ContentMismatch, match="more than the 500000 bytes"):
        await files.download(stored.file_id, work / "new.bin")
    assert names(work) == {"keep.bin"}


async def test_a_missing_blob_is_a_content_mismatch(files: StoredFiles) -> None:
    """A ready row whose blob vanished says so, with a hint."""
    stored = await files.put(chunks_of(b"here today"), filename="gone.txt")
    assert await files.blobs.delete(stored.blob_key)
    with pytest.raises(ContentMismatch, match="is missing from") as caught:
        await read_all(files, stored.file_id)
    assert caught.value.expected_size == 10
    assert caught.value.size is None


# ------------------------------------------------------------------ bad input


async def test_bad_paths_and_ids_are_typed_errors_with_hints(
    files: StoredFiles, tmp_path: Path
) -> None:
    """Missing file, directory, special file, malformed and unknown ids: each says what to do."""
    cases: list[tuple[Awaitable[object], type[Exception], str]] = [
        (files.put_path(tmp_path / "absent"), InvalidInput, "no file"),
        (files.put_path(tmp_path), InvalidInput, "is a directory"),
        (files.put_path("/dev/null"), InvalidInput, "not a regular file"),
        (files.get("12345"), InvalidInput, "not a stored-file id"),
        (files.get("file-" + "0" * 32), StoredFileNotFound, "no stored file"),
        (files.delete("FILE-" + "0" * 32), InvalidInput, "not a stored-file id"),
        (files.download("file-" + "1" * 32, tmp_path / "o"), StoredFileNotFound, "no stored"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text) as caught:
            await call
        assert isinstance(caught.value, InvalidInput | StoredFileNotFound)
        assert caught.value.hint
    stored = await files.put(chunks_of(b"x"), filename="x")
    with pytest.raises(InvalidInput, match="is a directory"):
        await files.download(stored.file_id, tmp_path)
    with pytest.raises(InvalidInput, match="is not a directory"):
        await files.download(stored.file_id, tmp_path / "no" / "such" / "dir")
    assert await files.list_files() == [stored]


# ------------------------------------------------------------------ Sessions and resources


async def test_session_scoped_files_follow_their_session(
    files: StoredFiles, store: PostgresBindingStore, database_url: str
) -> None:
    """A Session output needs a live Session; a file in use as a resource cannot be removed."""
    with pytest.raises(InvalidInput, match="no session"):
        await files.put(chunks_of(b"o"), filename="o", session_id="absent", output_path="o")
    await store.ensure_session("s1")
    output = await files.put(
        chunks_of(b"result"), filename="result.txt", session_id="s1", output_path="out/result.txt"
    )
    assert (output.session_id, output.output_path) == ("s1", "out/result.txt")
    plain = await files.put(chunks_of(b"input"), filename="input.txt")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mango_session_resources (id, session_id, kind, file_id, mount_path,"
            " state) VALUES (%s, 's1', 'file', %s, '/mnt/session/uploads/input.txt', 'active')",
            ("res-" + "a" * 32, plain.file_id),
        )
    with pytest.raises(ResourceConflict, match="is a resource of session 's1'"):
        await files.delete(plain.file_id)
    assert await files.get(plain.file_id) == plain
    await store.fence_session("s1")
    with pytest.raises(SessionDeleting):
        await files.put(chunks_of(b"late"), filename="late", session_id="s1", output_path="l")
    with pytest.raises(PreconditionFailed, match="still has rows referring to it"):
        await store.delete_session("s1")


async def test_no_secret_reaches_a_row(
    files: StoredFiles, database_url: str, aws_env: dict[str, str]
) -> None:
    """Rows hold ids, names, digests and keys: no credential of the database or the store."""
    await files.put(chunks_of(b"secretless"), filename="s.txt")
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute("SELECT row_to_json(f)::text FROM mango_files f")
        text = "\n".join(str(row[0]) for row in await cursor.fetchall())
    assert aws_env["AWS_SECRET_ACCESS_KEY"] not in text
    assert aws_env["AWS_ACCESS_KEY_ID"] not in text
    password = urlsplit(database_url).password
    if password:
        assert password not in text


# ------------------------------------------------------------------ the reconciler


async def test_reconcile_removes_what_crashes_left(
    files: StoredFiles, store: PostgresBindingStore
) -> None:
    """Stalled uploads, unfinished deletions and unrecorded blobs go; everything else stays."""
    catalog = PostgresFileCatalog(store.pool)
    kept = await files.put(chunks_of(b"kept"), filename="kept.txt")

    # A crash after the blob was published, before the row became ready.
    crashed = new_file_id()
    crashed_key = file_blob_key(NS, crashed)
    await catalog.begin_upload(NewFile(crashed, "c.bin", "application/octet-stream", crashed_key))
    await files.blobs.put(crashed_key, chunks_of(b"half"))
    # A crash in the middle of a deletion.
    deleting = await files.put(chunks_of(b"doomed"), filename="doomed.txt")
    await catalog.begin_delete(deleting.file_id)
    # A blob no row names, and keys this deployment does not own or understand.
    orphan = file_blob_key(NS, new_file_id())
    other_namespace = file_blob_key("ns-other", new_file_id())
    not_a_file = file_blob_prefix(NS) + "README"
    for key in (orphan, other_namespace, not_a_file):
        await files.blobs.put(key, chunks_of(b"stray"))

    cautious = await files.reconcile(stale_after=timedelta(hours=1))
    assert (cautious.abandoned_uploads, cautious.removed_files, cautious.orphan_blobs) == (0, 1, 0)
    report = await files.reconcile(stale_after=timedelta(0))
    assert (report.abandoned_uploads, report.removed_files, report.orphan_blobs) == (1, 1, 1)
    assert report.failures == ()
    assert await files.list_files() == [kept]
    assert await blob_keys(files) == sorted([kept.blob_key, other_namespace, not_a_file])
    again = await files.reconcile(stale_after=timedelta(0))
    assert (again.abandoned_uploads, again.removed_files, again.orphan_blobs) == (0, 0, 0)


# ------------------------------------------------------------------ S3 unreachable


async def test_an_unreachable_s3_endpoint_is_retryable_and_leaves_nothing_visible(
    store: PostgresBindingStore, aws_env: dict[str, str], refused_port: int
) -> None:
    """Connection refused: FileStoreUnavailable with a hint, quickly; no ready row appears."""
    port = refused_port
    blobs = S3FileStore("mango-down", endpoint_url=f"http://127.0.0.1:{port}")
    files = StoredFiles(PostgresFileCatalog(store.pool), blobs, NS)
    with pytest.raises(FileStoreUnavailable) as caught:
        await files.put(chunks_of(b"nowhere"), filename="n.txt")
    assert not caught.value.permanent
    assert caught.value.hint
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"] not in str(caught.value)
    assert await files.list_files() == []
    with pytest.raises(FileStoreUnavailable):
        await files.reconcile(stale_after=timedelta(0))
