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
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import attrs

from mango.app.file_reconcile import DEFAULT_STALE_AFTER, FileReconcileReport, reconcile_files
from mango.app.local_io import (
    blocking,
    close_first,
    discard_target,
    finish_target,
    open_source,
    open_target,
    opened,
    write_all,
)
from mango.domain.errors import (
    ContentMismatch,
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

DEFAULT_HEARTBEAT = 30.0
"""Seconds between refreshes of an upload's row while its bytes stream."""
_CHUNK = 1024 * 1024
_LOG = logging.getLogger("mango.files")


def guess_mime_type(filename: str) -> str:
    """The MIME type for ``filename``'s extension, else ``application/octet-stream``."""
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    return guessed or DEFAULT_MIME_TYPE


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
                new.blob_key, self.refreshing(file_id, chunks), size=size, sha256=sha256
            )
            return await self.catalog.complete_upload(file_id, info)
        except BaseException:
            cleanup = asyncio.ensure_future(self.discard_upload(file_id, new.blob_key))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(cleanup)
            raise

    async def refreshing(
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

    async def discard_upload(self, file_id: str, key: str) -> None:
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
        fd, size = await opened(close_first, open_source, source)
        try:

            async def read() -> AsyncIterator[bytes]:
                while chunk := await blocking(os.read, fd, _CHUNK):
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
    async def open(
        self, file_id: str, *, hash_check: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a ready file's content: ``async with files.open(id) as chunks``.

        Every byte is checked against the row: a blob that is missing, longer,
        shorter or different raises :class:`ContentMismatch` (a surplus before
        it is passed on; the rest when the iteration ends). Raises as
        :meth:`get` on entry. ``hash_check=False`` leaves the SHA-256 to a
        consumer that checks it itself (a File Resource import does, against
        the same row), so the bytes are hashed once; the size is checked
        either way.
        """
        row = await self.get(file_id)
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(
                    self.blobs.open(
                        row.blob_key, size=row.size, sha256=row.sha256 if hash_check else None
                    )
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
        fd, temp = await opened(discard_target, open_target, target)
        done = False
        try:
            async with self.open(file_id) as chunks:
                async for chunk in chunks:
                    await blocking(write_all, fd, chunk)
            if temp is not None:
                await blocking(finish_target, fd, temp, target)
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
        is removed; then the store's leftovers of interrupted puts
        (:mod:`mango.app.file_reconcile`).
        """
        return await reconcile_files(
            self.catalog, self.blobs, self.namespace, stale_after=stale_after, limit=limit
        )


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
