"""Session resource rows in PostgreSQL (``mango_session_resources``).

Every change that admits a resource runs under the Session row's lock
(``SELECT ... FOR UPDATE``), so two concurrent additions see each other:
the overlap and count rules hold whatever races.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import cattrs
import psycopg
from psycopg.rows import dict_row

from mango.domain.errors import (
    InvalidInput,
    SessionDeleting,
    StoredFileNotFound,
    StoredFileNotReady,
)
from mango.domain.resources import (
    MAX_SESSION_RESOURCES,
    NewResource,
    SessionResource,
    overlapping_paths,
)
from mango.postgres._errors import translate_errors
from mango.postgres.schema import Pool

__all__ = ["PostgresResourceCatalog"]

_COLUMNS = "id AS resource_id, session_id, kind, file_id, mount_path, state, created_at, updated_at"
_SELECT = f"SELECT {_COLUMNS} FROM mango_session_resources"  # noqa: S608 - constants only
_INSERT = (
    "INSERT INTO mango_session_resources"  # noqa: S608 - constants only
    " (id, session_id, kind, file_id, mount_path, state)"
    f" VALUES (%s, %s, 'file', %s, %s, 'active') RETURNING {_COLUMNS}"
)
_BEGIN_REMOVE = (
    "UPDATE mango_session_resources SET state = 'deleting', updated_at = now()"  # noqa: S608
    f" WHERE id = %s AND session_id = %s RETURNING {_COLUMNS}"
)
_ORDER = " ORDER BY (state = 'deleting') DESC, created_at, id"

_converter = cattrs.Converter()
_converter.register_structure_hook(datetime, lambda value, _: value.astimezone(UTC))


def _resource(row: dict[str, Any]) -> SessionResource:
    return _converter.structure(row, SessionResource)


@attrs.define
class PostgresResourceCatalog:
    """Session resource rows on a pool the caller owns (the binding store's, usually)."""

    _pool: Pool

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    async def add_resource(
        self, new: NewResource, *, limit: int = MAX_SESSION_RESOURCES
    ) -> SessionResource:
        """Insert an ``active`` resource; every rule checked under the Session row's lock."""
        async with self._connection("adding a session resource") as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT deleting_at FROM mango_sessions WHERE id = %s FOR UPDATE",
                (new.session_id,),
            )
            session = await cursor.fetchone()
            if session is None:
                raise InvalidInput(f"no session {new.session_id!r}")
            if session[0] is not None:
                raise SessionDeleting(f"session {new.session_id!r} is being deleted")
            cursor = await conn.execute(
                "SELECT state FROM mango_files WHERE id = %s FOR SHARE", (new.file_id,)
            )
            found = await cursor.fetchone()
            if found is None or found[0] == "deleting":
                raise StoredFileNotFound(new.file_id)
            if found[0] != "ready":
                raise StoredFileNotReady(
                    f"stored file {new.file_id!r} is still uploading",
                    hint="wait for its upload to finish, then add it",
                )
            cursor = await conn.execute(
                "SELECT mount_path FROM mango_session_resources"
                " WHERE session_id = %s AND state = 'active'",
                (new.session_id,),
            )
            active = [row[0] for row in await cursor.fetchall()]
            clashes = overlapping_paths(active, new.mount_path)
            if clashes:
                raise InvalidInput(
                    f"mount path {new.mount_path!r} overlaps the Session's resource at "
                    f"{clashes[0]!r}: two resources may not share a path or be nested",
                    hint="choose another path with --path, or remove the other resource first",
                )
            if len(active) >= limit:
                raise InvalidInput(
                    f"session {new.session_id!r} already has {len(active)} file resources, "
                    f"the most a Session may have",
                    hint="remove resources it no longer needs first",
                )
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(
                _INSERT.encode(), (new.resource_id, new.session_id, new.file_id, new.mount_path)
            )
            row = await rows.fetchone()
        assert row is not None  # noqa: S101 - INSERT ... RETURNING yields one row
        return _resource(row)

    async def get_resource(self, resource_id: str) -> SessionResource | None:
        """The row in any state, or None."""
        async with self._connection("reading a session resource") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute((_SELECT + " WHERE id = %s").encode(), (resource_id,))
            row = await rows.fetchone()
        return None if row is None else _resource(row)

    async def list_resources(self, session_id: str) -> Sequence[SessionResource]:
        """The Session's rows, ``deleting`` first, then oldest first."""
        async with self._connection("listing session resources") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(
                (_SELECT + " WHERE session_id = %s" + _ORDER).encode(), (session_id,)
            )
            found = await rows.fetchall()
        return [_resource(row) for row in found]

    async def begin_remove(self, session_id: str, resource_id: str) -> SessionResource | None:
        """``active`` -> ``deleting`` for the Session's resource; None if it has none such."""
        async with self._connection("removing a session resource") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(
                _BEGIN_REMOVE.encode(),
                (resource_id, session_id),
            )
            row = await rows.fetchone()
        return None if row is None else _resource(row)

    async def finish_remove(self, resource_id: str) -> bool:
        """Delete a ``deleting`` row; True if it was there."""
        async with self._connection("finishing a resource removal") as conn:
            cursor = await conn.execute(
                "DELETE FROM mango_session_resources WHERE id = %s AND state = 'deleting'",
                (resource_id,),
            )
            return cursor.rowcount == 1

    async def drop_session_resources(self, session_id: str) -> int:
        """Delete every resource row of a fenced Session; how many went."""
        async with self._connection("removing a session's resources") as conn:
            cursor = await conn.execute(
                "DELETE FROM mango_session_resources WHERE session_id = %s"
                " AND EXISTS (SELECT 1 FROM mango_sessions"
                " WHERE id = %s AND deleting_at IS NOT NULL)",
                (session_id, session_id),
            )
            return cursor.rowcount
