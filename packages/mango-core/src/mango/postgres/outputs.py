"""Session output rows in PostgreSQL: ``mango_files`` rows with a Session and an output path.

Every change locks the Session's row first (``FOR UPDATE``), then the rows
it changes, so two publications of one Session, or a publication and the
Session's deletion, never interleave; the partial unique index on
``(session_id, output_path) WHERE state = 'ready'`` keeps one ready row per path.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import psycopg
from psycopg.rows import dict_row

from mango.domain.errors import InvalidInput, OutputRejected, PreconditionFailed, SessionDeleting
from mango.domain.files import FileState, StoredFile
from mango.domain.outputs import MAX_OUTPUT_FILES, OutputCommit, StagedOutput
from mango.postgres._errors import translate_errors
from mango.postgres.files import COLUMNS, stored_file
from mango.postgres.schema import Pool

__all__ = ["PostgresOutputCatalog"]

# Built from constants only (S608 cannot tell): no value is ever formatted into SQL.
_SELECT = f"SELECT {COLUMNS} FROM mango_files"  # noqa: S608
_READY_OUTPUTS = _SELECT + " WHERE session_id = %s AND state = 'ready' AND output_path IS NOT NULL"
_TO_DELETING = (
    "UPDATE mango_files SET state = 'deleting', updated_at = now()"  # noqa: S608
    f" WHERE id = ANY(%s) RETURNING {COLUMNS}"
)


@attrs.define
class PostgresOutputCatalog:
    """Output rows on a pool the caller owns (the binding store's, usually)."""

    _pool: Pool

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    @staticmethod
    async def _lock_session(conn: psycopg.AsyncConnection[Any], session_id: str) -> None:
        cursor = await conn.execute(
            "SELECT deleting_at FROM mango_sessions WHERE id = %s FOR UPDATE", (session_id,)
        )
        session = await cursor.fetchone()
        if session is None:
            raise InvalidInput(f"no session {session_id!r}")
        if session[0] is not None:
            raise SessionDeleting(f"session {session_id!r} is being deleted")

    @staticmethod
    async def _rows(
        conn: psycopg.AsyncConnection[Any], query: str, params: Sequence[object]
    ) -> list[StoredFile]:
        cursor = conn.cursor(row_factory=dict_row)
        await cursor.execute(query.encode(), params)
        return [stored_file(row) for row in await cursor.fetchall()]

    async def list_outputs(self, session_id: str) -> Sequence[StoredFile]:
        """The Session's ready outputs, by path."""
        async with self._connection("listing session outputs") as conn:
            return await self._rows(conn, _READY_OUTPUTS + " ORDER BY output_path", (session_id,))

    async def find_output(self, session_id: str, path: str) -> StoredFile | None:
        """The Session's ready output at ``path``, or None."""
        async with self._connection("reading a session output") as conn:
            found = await self._rows(
                conn, _READY_OUTPUTS + " AND output_path = %s", (session_id, path)
            )
        return found[0] if found else None

    async def commit_snapshot(
        self,
        session_id: str,
        paths: Sequence[str],
        staged: Sequence[StagedOutput],
        *,
        limit: int = MAX_OUTPUT_FILES,
    ) -> OutputCommit:
        """Make ``paths`` the Session's outputs in one transaction (see the port)."""
        wanted = set(paths)
        if len(wanted) > limit:
            first = sorted(wanted)[limit]
            raise OutputRejected(
                f"session {session_id!r} would have {len(wanted)} published outputs, more than "
                f"the {limit} a Session may have; {first!r} and others are not published",
                path=first,
                hint="remove files from /mnt/session/outputs, then publish again",
            )
        ids = [item.file_id for item in staged]
        async with self._connection("publishing session outputs") as conn, conn.transaction():
            await self._lock_session(conn, session_id)
            ready = {
                row.output_path: row
                for row in await self._rows(conn, _READY_OUTPUTS + " FOR UPDATE", (session_id,))
            }
            mine = await self._rows(conn, _SELECT + " WHERE id = ANY(%s) FOR UPDATE", (ids,))
            pending = {row.file_id: row for row in mine}
            retire: list[str] = [row.file_id for path, row in ready.items() if path not in wanted]
            finish: list[StagedOutput] = []
            for item in staged:
                row = pending.get(item.file_id)
                if row is None or row.state is not FileState.UPLOADING:
                    path = row.output_path if row is not None else item.file_id
                    raise PreconditionFailed(
                        f"the upload of output {path!r} was abandoned before it was published",
                        hint="publish the Session's outputs again",
                    )
                if row.session_id != session_id or row.output_path not in wanted:
                    raise PreconditionFailed(
                        f"stored file {item.file_id!r} is not a pending output of this snapshot"
                    )
                previous = ready.get(row.output_path)
                if previous is not None and (previous.size, previous.sha256) == (
                    item.info.size,
                    item.info.sha256,
                ):
                    retire.append(item.file_id)  # the same content is already published
                    continue
                if previous is not None:
                    retire.append(previous.file_id)
                finish.append(item)
            leftover = await self._rows(
                conn,
                _SELECT
                + " WHERE session_id = %s AND state = 'deleting' AND output_path IS NOT NULL",
                (session_id,),
            )
            # Replaced rows leave 'ready' first: one ready row per path (the unique index).
            retired = await self._rows(conn, _TO_DELETING, (retire,)) if retire else []
            completed: list[StoredFile] = []
            for item in finish:
                completed += await self._rows(
                    conn,
                    "UPDATE mango_files SET state = 'ready', size_bytes = %s,"  # noqa: S608
                    " checksum_sha256 = %s, updated_at = now() WHERE id = %s"
                    f" RETURNING {COLUMNS}",
                    (item.info.size, item.info.sha256, item.file_id),
                )
        return OutputCommit(ready=tuple(completed), garbage=(*retired, *leftover))

    async def drop_session_outputs(self, session_id: str) -> Sequence[StoredFile]:
        """Every file of the Session -> ``deleting`` (an upload in flight too); return them all."""
        async with self._connection("removing a session's outputs") as conn, conn.transaction():
            await conn.execute(
                "SELECT 1 FROM mango_sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            rows = await self._rows(
                conn, _SELECT + " WHERE session_id = %s FOR UPDATE", (session_id,)
            )
            return await self._rows(conn, _TO_DELETING, ([row.file_id for row in rows],))
