"""SQL migrations shipped inside mango-core, applied once under an advisory lock.

Why no migration library: yoyo and alembic run on synchronous drivers and take
their own locks, so they would need a second connection stack next to the
async pool. The runner here is deliberately tiny: it takes one PostgreSQL
advisory lock (a fixed key) on one pool connection, creates
``mango_schema_migrations`` if needed, and applies each pending
``migrations/NNNN_name.sql`` in its own transaction together with the row that
records it. Concurrent openers wait on the lock and then find nothing to do.
A recorded migration whose file changed is a :class:`ConfigurationError`:
history is never rewritten silently.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from collections.abc import Sequence
from typing import TypeAlias

import attrs
import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from mango.domain.errors import ConfigurationError

__all__ = ["MIGRATION_LOCK_KEY", "Migration", "Pool", "apply_migrations", "load_migrations"]

Pool: TypeAlias = AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]
"""The connection pool type used by the store (tuple rows, autocommit)."""

MIGRATION_LOCK_KEY = 0x6D616E676F_0001
"""The ``pg_advisory_lock`` key that serialises schema changes ("mango", 1)."""

_FILE_NAME = re.compile(r"(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql\Z")
_CREATE_HISTORY = b"""
CREATE TABLE IF NOT EXISTS mango_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@attrs.frozen
class Migration:
    """One SQL migration file: ``NNNN_name.sql``."""

    version: int
    name: str
    sql: str = attrs.field(repr=False)

    @property
    def checksum(self) -> str:
        """``sha256:<hex>`` of the SQL text, recorded when applied."""
        return "sha256:" + hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def load_migrations() -> tuple[Migration, ...]:
    """The migrations shipped in ``mango/postgres/migrations``, in version order."""
    folder = importlib.resources.files("mango.postgres").joinpath("migrations")
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is None:
            continue
        version = int(match["version"])
        if version in found:
            raise ConfigurationError(f"two migrations share version {version:04d}")
        found[version] = Migration(version, match["name"], entry.read_text(encoding="utf-8"))
    return tuple(found[version] for version in sorted(found))


async def apply_migrations(
    pool: Pool,
    migrations: Sequence[Migration] | None = None,
) -> list[Migration]:
    """Apply what is pending (default: :func:`load_migrations`); return what was applied now.

    The pool's connections must be in autocommit mode. psycopg errors
    propagate; callers translate them.
    """
    pending = load_migrations() if migrations is None else tuple(migrations)
    applied: list[Migration] = []
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            await conn.execute(_CREATE_HISTORY)
            cursor = await conn.execute("SELECT version, checksum FROM mango_schema_migrations")
            recorded: dict[int, str] = {row[0]: row[1] for row in await cursor.fetchall()}
            for migration in pending:
                checksum = recorded.get(migration.version)
                if checksum is None:
                    async with conn.transaction():
                        await conn.execute(migration.sql.encode("utf-8"))
                        await conn.execute(
                            "INSERT INTO mango_schema_migrations (version, name, checksum) "
                            "VALUES (%s, %s, %s)",
                            (migration.version, migration.name, migration.checksum),
                        )
                    applied.append(migration)
                elif checksum != migration.checksum:
                    raise ConfigurationError(
                        f"migration {migration.version:04d}_{migration.name} was applied with "
                        f"checksum {checksum}, but this mango ships {migration.checksum}",
                        hint="a shipped migration must never change; "
                        "install the mango version that created this database",
                    )
        finally:
            try:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
            except psycopg.Error:
                await conn.close()  # ending the session releases the lock for sure
    return applied
