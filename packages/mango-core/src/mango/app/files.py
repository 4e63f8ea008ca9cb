"""Stored files: the two-phase upload, verified reads, deletion and the reconciler pass.

:class:`StoredFiles` drives a :class:`~mango.domain.files.FileCatalog` (the
rows) and a :class:`~mango.domain.files.FileStore` (the blobs) so that they
always agree, whatever crashes:

* **put**: row ``uploading`` -> stream the bytes into the blob (counted and
  hashed; ``updated_at`` refreshed every ``heartbeat`` seconds) -> row
  ``ready`` with the verified size and SHA-256. A failure or cancellation
  moves the row to ``deleting``, removes whatever blob there is and then the
  row; a crash leaves an ``uploading`` row that :meth:`StoredFiles.reconcile`
  abandons once it has not been touched for ``stale_after``.
* **read**: only ``ready`` rows, and every byte is checked against the row
  on the way (:class:`ContentMismatch` otherwise; :meth:`download` publishes
  the local copy only once the whole content checked out).
* **delete**: row ``deleting`` (invisible) -> blob -> row.
* **reconcile**: stalled uploads -> ``deleting``; every ``deleting`` row's
  blob, then the row; blobs under the deployment's prefix that no row names
  (older than ``stale_after``); leftovers of interrupted puts in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import os
import stat
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import attrs

from mango.domain.errors import (
    ContentMismatch,
    InvalidInput,
    MangoError,
    PreconditionFailed,
    StoredFileNotFound,
    StoredFileNotReady,
)
from mango.domain.files import (
    DEFAULT_MIME_TYPE,
    FileCatalog,
    FileState,
    FileStore,
    NewFile,
    StoredFile,
    file_blob_key,
    file_blob_prefix,
    new_file_id,
    validate_file_id,
    validate_filename,
    validate_mime_type,
)

__all__ = [
    "DEFAULT_HEARTBEAT",
    "DEFAULT_STALE_AFTER",
    "FileReconcileReport",
    "StoredFiles",
    "guess_mime_type",
]

T = TypeVar("T")

DEFAULT_HEARTBEAT = 30.0
"""Seconds between refreshes of an upload's row while its bytes stream."""
DEFAULT_STALE_AFTER = timedelta(hours=1)
"""How long an upload's row may go untouched before the reconciler gives it up."""
_CHUNK = 1024 * 1024
_LOG = logging.getLogger("mango.files")


def guess_mime_type(filename: str) -> str:
    """The MIME type for ``filename``'s extension, else ``application/octet-stream``."""
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    return guessed or DEFAULT_MIME_TYPE


@attrs.frozen
class FileReconcileReport:
    """What one reconciler pass did; ``failures`` are ``(file id or key, message)``."""

    abandoned_uploads: int = 0
    removed_files: int = 0
    orphan_blobs: int = 0
    incomplete_puts: int = 0
    failures: tuple[tuple[str, str], ...] = ()


async def _blocking(function: Callable[..., T], *args: object) -> T:
    """Run ``function`` in a thread; a cancelled caller first waits for it to finish."""
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller has gone
        raise


async def _opened(undo: Callable[[T], object], function: Callable[..., T], *args: object) -> T:
    """Run ``function`` (which opens something) in a thread; if cancelled, ``undo`` its result."""
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def release(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                undo(done.result())

        future.add_done_callback(release)
        raise


def _close_first(opened: tuple[int, object]) -> None:
    os.close(opened[0])


def _discard_target(opened: tuple[int, Path | None]) -> None:
    fd, temp = opened
    os.close(fd)
    if temp is not None:
        with contextlib.suppress(OSError):
            temp.unlink()


def _open_source(path: Path) -> tuple[int, int]:
    """Open ``path`` for reading: ``(fd, size)``; bad paths are :class:`InvalidInput`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput(f"no file {str(path)!r}", hint="check the path") from None
    except IsADirectoryError:
        raise _directory(path) from None
    except PermissionError:
        raise InvalidInput(
            f"cannot read {str(path)!r}: permission denied", hint="check its permissions"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _directory(path)
        raise InvalidInput(
            f"{str(path)!r} is not a regular file", hint="store a regular file (not a device)"
        )
    return fd, info.st_size


def _directory(path: Path) -> InvalidInput:
    return InvalidInput(
        f"{str(path)!r} is a directory",
        hint="store one file at a time (make an archive of a directory first)",
    )


def _write_all(fd: int, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view) :]


@attrs.define
class StoredFiles:
    """The Files store: rows and blobs kept in agreement.

    ``namespace`` is the deployment namespace (it prefixes every blob key).
    Built by :func:`mango.open_file_store` (or by hand on any catalog and
    store); closing the catalog and the store is their owner's business.
    """

    catalog: FileCatalog
    blobs: FileStore
    namespace: str
    heartbeat: float = DEFAULT_HEARTBEAT

    @property
    def location(self) -> str:
        """Where the blobs are (no credential in it)."""
        return self.blobs.location

    # ------------------------------------------------------------------ put

    async def put(
        self,
        chunks: AsyncIterable[bytes],
        *,
        filename: str,
        mime_type: str | None = None,
        size: int | None = None,
        sha256: str | None = None,
        session_id: str | None = None,
        output_path: str | None = None,
    ) -> StoredFile:
        """Store the bytes of ``chunks`` as a new file and return its ``ready`` row.

        ``size`` and ``sha256``, if given, must match the bytes
        (:class:`ContentMismatch` otherwise). ``mime_type`` defaults to a
        guess from ``filename``. ``session_id`` (and ``output_path``) make it
        a Session-scoped file. Nothing is visible until the bytes are
        verified; any failure, a cancellation included, removes what was
        started (and the reconciler does after a crash).
        """
        file_id = new_file_id()
        new = NewFile(
            file_id=file_id,
            filename=validate_filename(filename),
            mime_type=validate_mime_type(mime_type or guess_mime_type(filename)),
            blob_key=file_blob_key(self.namespace, file_id),
            session_id=session_id,
            output_path=output_path,
        )
        await self.catalog.begin_upload(new)
        try:
            info = await self.blobs.put(
                new.blob_key, self._refreshing(file_id, chunks), size=size, sha256=sha256
            )
            return await self.catalog.complete_upload(file_id, info)
        except BaseException:
            cleanup = asyncio.ensure_future(self._discard(file_id, new.blob_key))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(cleanup)
            raise

    async def _refreshing(
        self, file_id: str, chunks: AsyncIterable[bytes]
    ) -> AsyncGenerator[bytes, None]:
        """``chunks``, refreshing the upload's row every ``heartbeat`` seconds."""
        last = time.monotonic()
        async for chunk in chunks:
            yield chunk
            now = time.monotonic()
            if now - last >= self.heartbeat:
                last = now
                if not await self.catalog.touch_upload(file_id):
                    raise PreconditionFailed(
                        f"the upload of stored file {file_id!r} was abandoned before it finished",
                        hint="the reconciler gives up uploads that stall; store the file again",
                    )

    async def _discard(self, file_id: str, key: str) -> None:
        """Undo a failed upload: row ``deleting``, blob, row. Best effort: reconcile finishes."""
        try:
            await self.catalog.abandon_upload(file_id)
            row = await self.catalog.get_file(file_id)
            if row is None or row.state is not FileState.DELETING:
                return  # gone, or ready: a completion whose answer was lost stays
            await self.blobs.delete(key)
            await self.catalog.remove_file(file_id)
        except MangoError as exc:
            # INFO: the store being down is the usual reason, and the reconciler finishes it.
            _LOG.info("failed upload %s not cleaned up (reconcile will): %s", file_id, exc)

    async def put_path(
        self, path: str | os.PathLike[str], *, name: str | None = None, mime_type: str | None = None
    ) -> StoredFile:
        """Store the regular file at ``path``, streamed; ``name`` defaults to its base name.

        A missing path, a directory or a non-regular file is
        :class:`InvalidInput`; a file that changes size while it is read is
        :class:`ContentMismatch` (and nothing is stored).
        """
        source = Path(path)
        filename = validate_filename(name if name is not None else source.name)
        fd, size = await _opened(_close_first, _open_source, source)
        try:

            async def read() -> AsyncIterator[bytes]:
                while chunk := await _blocking(os.read, fd, _CHUNK):
                    yield chunk

            try:
                return await self.put(read(), filename=filename, mime_type=mime_type, size=size)
            except ContentMismatch as exc:
                raise ContentMismatch(
                    f"{str(source)!r} changed while it was being stored ({size} bytes when opened)",
                    expected_size=exc.expected_size,
                    size=exc.size,
                    hint="store it again once nothing writes to it",
                ) from exc
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ reads

    async def get(self, file_id: str) -> StoredFile:
        """The ``ready`` row of ``file_id``.

        :class:`InvalidInput` for a malformed id, :class:`StoredFileNotFound`
        if there is none (or it is being deleted), :class:`StoredFileNotReady`
        while it uploads.
        """
        validate_file_id(file_id)
        row = await self.catalog.get_file(file_id)
        if row is None or row.state is FileState.DELETING:
            raise StoredFileNotFound(file_id)
        if row.state is FileState.UPLOADING:
            raise StoredFileNotReady(
                f"stored file {file_id!r} is still uploading",
                hint="wait for its upload to finish; an upload that crashed is removed by "
                "'mango store reconcile'",
            )
        return row

    async def list_files(self, limit: int = 1000) -> Sequence[StoredFile]:
        """``ready`` files, oldest first (at most ``limit``)."""
        return await self.catalog.list_files(limit)

    @contextlib.asynccontextmanager
    async def open(self, file_id: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a ready file's content: ``async with files.open(id) as chunks``.

        Every byte is checked against the row: a blob that is missing, longer,
        shorter or different raises :class:`ContentMismatch` (a surplus before
        it is passed on; the rest when the iteration ends). Raises as
        :meth:`get` on entry.
        """
        row = await self.get(file_id)
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(
                    self.blobs.open(row.blob_key, size=row.size, sha256=row.sha256)
                )
            except FileNotFoundError:
                raise ContentMismatch(
                    f"the content of stored file {file_id!r} is missing from {self.location}",
                    expected_size=row.size,
                    expected_sha256=row.sha256,
                    hint=_DAMAGED_HINT,
                ) from None
            relabelled = _relabelled(chunks, file_id)
            stack.push_async_callback(relabelled.aclose)
            yield relabelled

    async def download(self, file_id: str, destination: str | os.PathLike[str]) -> StoredFile:
        """Write a ready file's content to ``destination``, all or nothing.

        The bytes go to a temporary file beside it, which replaces
        ``destination`` only once the whole content checked out (fsynced). A
        destination that is not a regular file (``/dev/null``, a pipe) is
        written directly. Returns the file's row.
        """
        target = Path(destination)
        row = await self.get(file_id)
        fd, temp = await _opened(_discard_target, _open_target, target)
        done = False
        try:
            async with self.open(file_id) as chunks:
                async for chunk in chunks:
                    await _blocking(_write_all, fd, chunk)
            if temp is not None:
                await _blocking(_finish_target, fd, temp, target)
            done = True
        finally:
            os.close(fd)
            if temp is not None and not done:
                with contextlib.suppress(OSError):
                    temp.unlink()
        return row

    # ------------------------------------------------------------------ delete

    async def delete(self, file_id: str) -> StoredFile:
        """Delete a stored file: row ``deleting`` (invisible at once), blob, row.

        Errors as :meth:`get`; :class:`~mango.domain.errors.ResourceConflict`
        while a Session resource refers to it. Repeating a deletion a crash
        cut short finishes it.
        """
        validate_file_id(file_id)
        row = await self.catalog.begin_delete(file_id)
        if row is None:
            raise StoredFileNotFound(file_id)
        if row.state is FileState.UPLOADING:
            raise StoredFileNotReady(
                f"stored file {file_id!r} is still uploading",
                hint="wait for its upload to finish; an upload that crashed is removed by "
                "'mango store reconcile'",
            )
        await self.blobs.delete(row.blob_key)
        await self.catalog.remove_file(file_id)
        return row

    # ------------------------------------------------------------------ reconcile

    async def reconcile(
        self, *, stale_after: timedelta = DEFAULT_STALE_AFTER, limit: int = 1000
    ) -> FileReconcileReport:
        """Clean what crashes left; every item is attempted and failures are reported.

        Uploads untouched for ``stale_after`` are given up; ``deleting``
        rows lose their blob and then the row; a blob under this
        deployment's prefix that no row names, older than ``stale_after``,
        is removed; then the store's leftovers of interrupted puts.
        """
        failures: list[tuple[str, str]] = []
        abandoned = await self.catalog.abandon_stale_uploads(stale_after, limit)
        removed = 0
        for row in await self.catalog.deleting_files(limit):
            try:
                await self.blobs.delete(row.blob_key)
                removed += await self.catalog.remove_file(row.file_id)
            except MangoError as exc:
                failures.append((row.file_id, str(exc)))
        orphans = await self._remove_orphans(stale_after, failures)
        incomplete = await self.blobs.discard_incomplete(stale_after)
        return FileReconcileReport(abandoned, removed, orphans, incomplete, tuple(failures))

    async def _remove_orphans(self, stale_after: timedelta, failures: list[tuple[str, str]]) -> int:
        prefix = file_blob_prefix(self.namespace)
        cutoff = datetime.now(UTC) - stale_after
        removed = 0
        batch: list[str] = []

        async def sweep() -> int:
            known = await self.catalog.known_blob_keys(batch)
            count = 0
            for key in batch:
                if key in known:
                    continue
                try:
                    count += await self.blobs.delete(key)
                except MangoError as exc:
                    failures.append((key, str(exc)))
            batch.clear()
            return count

        async for entry in self.blobs.scan(prefix):
            try:
                validate_file_id(entry.key[len(prefix) :])
            except InvalidInput:
                continue  # not a stored file's key: not ours to judge
            if entry.modified <= cutoff:
                batch.append(entry.key)
            if len(batch) >= 500:
                removed += await sweep()
        if batch:
            removed += await sweep()
        return removed


_DAMAGED_HINT = (
    "the store lost or altered this file's bytes: restore them from a backup, or remove the "
    "file with 'mango store rm ID'"
)


async def _relabelled(chunks: AsyncIterator[bytes], file_id: str) -> AsyncGenerator[bytes, None]:
    """``chunks``, with a mismatch reported against the stored file."""
    try:
        async for chunk in chunks:
            yield chunk
    except ContentMismatch as exc:
        raise ContentMismatch(
            f"stored file {file_id!r} is damaged: {exc}",
            expected_size=exc.expected_size,
            size=exc.size,
            expected_sha256=exc.expected_sha256,
            sha256=exc.sha256,
            hint=_DAMAGED_HINT,
        ) from exc


def _open_target(target: Path) -> tuple[int, Path | None]:
    """A descriptor to write ``target``'s new content to, and the temporary file (if any)."""
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        raise InvalidInput(f"{str(target)!r}: a parent is not a directory") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"{str(target)!r} is a directory", hint="name a file to write")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return os.open(target, os.O_WRONLY | os.O_CLOEXEC), None
    parent = target.parent
    if not parent.is_dir():
        raise InvalidInput(
            f"cannot write {str(target)!r}: {str(parent)!r} is not a directory",
            hint="create the directory first",
        )
    try:
        fd, name = tempfile.mkstemp(dir=parent, prefix=f".{target.name[:100]}.", suffix=".part")
    except PermissionError:
        raise InvalidInput(f"cannot write in {str(parent)!r}: permission denied") from None
    return fd, Path(name)


def _finish_target(fd: int, temp: Path, target: Path) -> None:
    os.fsync(fd)
    os.fchmod(fd, 0o666 & ~_umask())  # what a plain open() would have made
    temp.replace(target)


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for every thread)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
