"""The PostgreSQL :class:`~mango.domain.files.FileCatalog`: the rows of stored files.

Tables ``mango_files`` and ``mango_session_resources`` (migration 0004).
Every state change is one guarded statement (``... WHERE state = 'uploading'``)
or a transaction that locks the row first, so racing processes never both
win. Rows are read by column name (``dict_row``) and structured into
:class:`~mango.domain.files.StoredFile` by one cattrs converter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import cattrs
import psycopg
from psycopg.rows import dict_row

from mango.domain.errors import (
    InvalidInput,
    PreconditionFailed,
    ResourceConflict,
    SessionDeleting,
)
from mango.domain.files import BlobInfo, FileState, NewFile, StoredFile
from mango.postgres._errors import translate_errors
from mango.postgres.schema import Pool

__all__ = ["COLUMNS", "PostgresFileCatalog", "stored_file"]

COLUMNS = (
    "id AS file_id, filename, mime_type, state, blob_key, created_at, updated_at,"
    " size_bytes AS size, checksum_sha256 AS sha256, session_id, output_path"
)
# Built from constants only (S608 cannot tell): no value is ever formatted into SQL.
_SELECT = f"SELECT {COLUMNS} FROM mango_files"  # noqa: S608
_INSERT = (
    "INSERT INTO mango_files"  # noqa: S608
    " (id, filename, mime_type, state, blob_key, session_id, output_path)"
    f" VALUES (%s, %s, %s, 'uploading', %s, %s, %s) RETURNING {COLUMNS}"
)
_COMPLETE = (
    "UPDATE mango_files SET state = 'ready', size_bytes = %s, checksum_sha256 = %s,"  # noqa: S608
    f" updated_at = now() WHERE id = %s AND state = 'uploading' RETURNING {COLUMNS}"
)
_ABANDON = (
    "UPDATE mango_files SET state = 'deleting', updated_at = now()"  # noqa: S608
    f" WHERE id = %s AND state = 'uploading' RETURNING {COLUMNS}"
)
_MARK_DELETING = (
    "UPDATE mango_files SET state = 'deleting', updated_at = now()"  # noqa: S608
    f" WHERE id = %s RETURNING {COLUMNS}"
)

_converter = cattrs.Converter()
_converter.register_structure_hook(datetime, lambda value, _: value.astimezone(UTC))


def stored_file(row: dict[str, Any]) -> StoredFile:
    """A ``mango_files`` row (selected as :data:`COLUMNS`) as a :class:`StoredFile`."""
    return _converter.structure(row, StoredFile)


@attrs.define
class PostgresFileCatalog:
    """Stored-file rows on a pool the caller owns (the binding store's, usually).

    Closing is the pool owner's business. Connection failures raise
    :class:`~mango.domain.errors.ProviderUnavailable` (retry).
    """

    _pool: Pool

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    async def _one(self, action: str, query: str, params: Sequence[object]) -> StoredFile | None:
        async with self._connection(action) as conn:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(query.encode(), params)
            row = await cursor.fetchone()
        return None if row is None else stored_file(row)

    async def _many(self, action: str, query: str, params: Sequence[object]) -> list[StoredFile]:
        async with self._connection(action) as conn:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(query.encode(), params)
            rows = await cursor.fetchall()
        return [stored_file(row) for row in rows]

    # ------------------------------------------------------------------ uploads

    async def begin_upload(self, new: NewFile) -> StoredFile:
        """Insert the row ``uploading``; a Session-scoped file needs a live Session.

        Raises :class:`InvalidInput` if the Session does not exist and
        :class:`SessionDeleting` if it is fenced (checked under its row lock).
        """
        params = (
            new.file_id,
            new.filename,
            new.mime_type,
            new.blob_key,
            new.session_id,
            new.output_path,
        )
        try:
            async with self._connection("recording an upload") as conn, conn.transaction():
                if new.session_id is not None:
                    cursor = await conn.execute(
                        "SELECT deleting_at FROM mango_sessions WHERE id = %s FOR UPDATE",
                        (new.session_id,),
                    )
                    locked = await cursor.fetchone()
                    if locked is None:
                        raise InvalidInput(f"no session {new.session_id!r}")
                    if locked[0] is not None:
                        raise SessionDeleting(f"session {new.session_id!r} is being deleted")
                rows = conn.cursor(row_factory=dict_row)
                await rows.execute(_INSERT.encode(), params)
                row = await rows.fetchone()
        except psycopg.errors.UniqueViolation as exc:
            raise PreconditionFailed(f"stored file {new.file_id!r} exists already") from exc
        assert row is not None  # noqa: S101 - INSERT ... RETURNING yields one row
        return stored_file(row)

    async def touch_upload(self, file_id: str) -> bool:
        """Refresh ``updated_at`` of an ``uploading`` row; False if it is not uploading."""
        async with self._connection("refreshing an upload") as conn:
            cursor = await conn.execute(
                "UPDATE mango_files SET updated_at = now() WHERE id = %s AND state = 'uploading'",
                (file_id,),
            )
            return cursor.rowcount == 1

    async def complete_upload(self, file_id: str, info: BlobInfo) -> StoredFile:
        """``uploading`` -> ``ready`` with the verified size and digest, or PreconditionFailed."""
        try:
            row = await self._one(
                "completing an upload",
                _COMPLETE,
                (info.size, info.sha256, file_id),
            )
        except psycopg.errors.UniqueViolation as exc:
            raise PreconditionFailed(
                f"stored file {file_id!r}: another ready file has its output path"
            ) from exc
        if row is None:
            raise PreconditionFailed(
                f"the upload of stored file {file_id!r} was abandoned before it finished",
                hint="an upload that stalls is given up by the reconciler; store the file again",
            )
        return row

    async def abandon_upload(self, file_id: str) -> StoredFile | None:
        """``uploading`` -> ``deleting`` (a failed upload); None if it was not uploading."""
        return await self._one(
            "abandoning an upload",
            _ABANDON,
            (file_id,),
        )

    # ------------------------------------------------------------------ reads

    async def get_file(self, file_id: str) -> StoredFile | None:
        """The row in any state, or None."""
        return await self._one("reading a stored file", _SELECT + " WHERE id = %s", (file_id,))

    async def list_files(self, limit: int = 1000) -> Sequence[StoredFile]:
        """``ready`` rows, oldest first."""
        if limit <= 0:
            return []
        return await self._many(
            "listing stored files",
            _SELECT + " WHERE state = 'ready' ORDER BY created_at, id LIMIT %s",
            (limit,),
        )

    # ------------------------------------------------------------------ deletion

    async def begin_delete(self, file_id: str) -> StoredFile | None:
        """``ready`` -> ``deleting`` under the row lock; other states come back unchanged.

        None if there is no row; :class:`ResourceConflict` while a Session
        resource refers to the file.
        """
        async with self._connection("deleting a stored file") as conn, conn.transaction():
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute((_SELECT + " WHERE id = %s FOR UPDATE").encode(), (file_id,))
            found = await rows.fetchone()
            if found is None:
                return None
            current = stored_file(found)
            if current.state is not FileState.READY:
                return current
            cursor = await conn.execute(
                "SELECT id, session_id FROM mango_session_resources WHERE file_id = %s"
                " ORDER BY created_at, id LIMIT 1",
                (file_id,),
            )
            resource = await cursor.fetchone()
            if resource is not None:
                raise ResourceConflict(
                    f"stored file {file_id!r} is a resource of session {resource[1]!r} "
                    f"({resource[0]})",
                    hint="remove the resource from the Session (or delete the Session) first",
                )
            await rows.execute(_MARK_DELETING.encode(), (file_id,))
            updated = await rows.fetchone()
        assert updated is not None  # noqa: S101 - the row is locked by this transaction
        return stored_file(updated)

    async def remove_file(self, file_id: str) -> bool:
        """Delete a ``deleting`` row; True if it was there."""
        try:
            async with self._connection("removing a stored file") as conn:
                cursor = await conn.execute(
                    "DELETE FROM mango_files WHERE id = %s AND state = 'deleting'", (file_id,)
                )
                return cursor.rowcount == 1
        except psycopg.errors.ForeignKeyViolation as exc:
            raise ResourceConflict(
                f"stored file {file_id!r} is still a resource of a session"
            ) from exc

    # ------------------------------------------------------------------ reconciliation

    async def abandon_stale_uploads(self, older_than: timedelta, limit: int = 1000) -> int:
        """``uploading`` rows untouched for ``older_than`` (database clock) -> ``deleting``."""
        if limit <= 0:
            return 0
        async with self._connection("abandoning stalled uploads") as conn:
            cursor = await conn.execute(
                "UPDATE mango_files SET state = 'deleting', updated_at = now() WHERE id IN"
                " (SELECT id FROM mango_files WHERE state = 'uploading'"
                " AND updated_at <= now() - %s ORDER BY updated_at, id LIMIT %s"
                " FOR UPDATE SKIP LOCKED) AND state = 'uploading'",
                (older_than, limit),
            )
            return cursor.rowcount

    async def deleting_files(self, limit: int = 1000) -> Sequence[StoredFile]:
        """``deleting`` rows, oldest change first."""
        if limit <= 0:
            return []
        return await self._many(
            "listing deleted files",
            _SELECT + " WHERE state = 'deleting' ORDER BY updated_at, id LIMIT %s",
            (limit,),
        )

    async def known_blob_keys(self, keys: Sequence[str]) -> frozenset[str]:
        """Which of ``keys`` a row names as its blob."""
        if not keys:
            return frozenset()
        async with self._connection("matching blobs to stored files") as conn:
            cursor = await conn.execute(
                "SELECT blob_key FROM mango_files WHERE blob_key = ANY(%s)", (list(keys),)
            )
            rows = await cursor.fetchall()
        return frozenset(row[0] for row in rows)
