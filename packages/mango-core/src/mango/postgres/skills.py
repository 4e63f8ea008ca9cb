"""The PostgreSQL :class:`~mango.domain.skills.SkillCatalog` (migration 0006).

A new version is numbered under the skill row's lock, so two uploads racing
for one name get consecutive versions; a Session and its pins are written
in one transaction under the Session row's lock.
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

from mango.domain.errors import InvalidInput, SessionDeleting
from mango.domain.skills import NewSkillVersion, SkillVersion, new_skill_id
from mango.postgres._errors import translate_errors
from mango.postgres.schema import Pool

__all__ = ["PostgresSkillCatalog"]

_COLUMNS = (
    "v.skill_id, s.name, v.version, v.description, v.blob_key, v.size_bytes AS size,"
    " v.checksum_sha256 AS sha256, v.expanded_size_bytes AS expanded_size, v.file_count,"
    " v.created_at"
)
_FROM = " FROM mango_skill_versions v JOIN mango_skills s ON s.id = v.skill_id"
_SELECT = f"SELECT {_COLUMNS}{_FROM}"
_PINS = (
    f"SELECT {_COLUMNS}{_FROM}"
    " JOIN mango_session_skills p ON p.skill_id = v.skill_id AND p.skill_version = v.version"
    " WHERE p.session_id = %s ORDER BY p.position"
)

_converter = cattrs.Converter()
_converter.register_structure_hook(datetime, lambda value, _: value.astimezone(UTC))


def _version(row: dict[str, Any]) -> SkillVersion:
    return _converter.structure(row, SkillVersion)


@attrs.define
class PostgresSkillCatalog:
    """Skill rows on a pool the caller owns (the binding store's, usually)."""

    _pool: Pool

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    async def add_version(self, new: NewSkillVersion) -> SkillVersion:
        """Record the next version of ``new.name`` (or return the latest if it has these bytes)."""
        async with self._connection("recording a skill version") as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO mango_skills (id, name) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                (new_skill_id(), new.name),
            )
            cursor = await conn.execute(
                "SELECT id FROM mango_skills WHERE name = %s FOR UPDATE", (new.name,)
            )
            found = await cursor.fetchone()
            assert found is not None  # noqa: S101 - inserted or present, and locked
            skill_id = found[0]
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(
                (_SELECT + " WHERE v.skill_id = %s ORDER BY v.version DESC LIMIT 1").encode(),
                (skill_id,),
            )
            latest = await rows.fetchone()
            if latest is not None and latest["sha256"] == new.sha256:
                return _version(latest)
            number = 1 if latest is None else latest["version"] + 1
            await conn.execute(
                "INSERT INTO mango_skill_versions (skill_id, version, description, blob_key,"
                " size_bytes, checksum_sha256, expanded_size_bytes, file_count)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    skill_id,
                    number,
                    new.description,
                    new.blob_key,
                    new.size,
                    new.sha256,
                    new.expanded_size,
                    new.file_count,
                ),
            )
            await rows.execute(
                (_SELECT + " WHERE v.skill_id = %s AND v.version = %s").encode(),
                (skill_id, number),
            )
            added = await rows.fetchone()
        assert added is not None  # noqa: S101 - inserted by this transaction
        return _version(added)

    async def list_versions(self) -> Sequence[SkillVersion]:
        """Every version, by name then version."""
        async with self._connection("listing skills") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute((_SELECT + " ORDER BY s.name, v.version").encode())
            return [_version(row) for row in await rows.fetchall()]

    async def get_version(self, name: str, version: int) -> SkillVersion | None:
        """One version, or None."""
        async with self._connection("reading a skill version") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(
                (_SELECT + " WHERE s.name = %s AND v.version = %s").encode(), (name, version)
            )
            row = await rows.fetchone()
        return None if row is None else _version(row)

    async def create_session(
        self, session_id: str, versions: Sequence[SkillVersion]
    ) -> tuple[bool, tuple[SkillVersion, ...]]:
        """Create the Session and its pins in one transaction (see the port)."""
        async with self._connection("creating a session") as conn, conn.transaction():
            cursor = await conn.execute(
                "INSERT INTO mango_sessions (id) VALUES (%s) ON CONFLICT (id) DO NOTHING",
                (session_id,),
            )
            created = cursor.rowcount == 1
            cursor = await conn.execute(
                "SELECT deleting_at FROM mango_sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            locked = await cursor.fetchone()
            assert locked is not None  # noqa: S101 - inserted or present, and locked
            if locked[0] is not None:
                raise SessionDeleting(
                    f"session {session_id!r} is being deleted",
                    hint="wait for the deletion to finish, then use a new session id",
                )
            rows = conn.cursor(row_factory=dict_row)
            if not created:
                await rows.execute(_PINS.encode(), (session_id,))
                pinned = tuple(_version(row) for row in await rows.fetchall())
                if [v.identity for v in pinned] != [v.identity for v in versions]:
                    have = ", ".join(str(v.ref) for v in pinned) or "no skills"
                    raise InvalidInput(
                        f"session {session_id!r} exists already, with {have}: a Session's "
                        "skills are pinned when it is created",
                        hint="create a new Session with the skills it needs",
                    )
                return False, pinned
            for position, version in enumerate(versions):
                await conn.execute(
                    "INSERT INTO mango_session_skills (session_id, position, skill_id,"
                    " skill_version) VALUES (%s, %s, %s, %s)",
                    (session_id, position, version.skill_id, version.version),
                )
        return True, tuple(versions)

    async def session_skills(self, session_id: str) -> tuple[SkillVersion, ...]:
        """The Session's pins, in order."""
        async with self._connection("reading a session's skills") as conn:
            rows = conn.cursor(row_factory=dict_row)
            await rows.execute(_PINS.encode(), (session_id,))
            return tuple(_version(row) for row in await rows.fetchall())

    async def drop_session_skills(self, session_id: str) -> int:
        """Remove the Session's pins."""
        async with self._connection("removing a session's skills") as conn:
            cursor = await conn.execute(
                "DELETE FROM mango_session_skills WHERE session_id = %s", (session_id,)
            )
            return cursor.rowcount
