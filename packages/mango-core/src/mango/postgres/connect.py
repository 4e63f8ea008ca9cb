"""Opening the PostgreSQL store: a probe connection, the pool, then the migrations."""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool

from mango.domain.errors import ConfigurationError
from mango.postgres._errors import redact, redact_conninfo, translate_errors
from mango.postgres.schema import Pool, apply_migrations
from mango.postgres.store import PostgresBindingStore

__all__ = ["open_store"]


async def open_store(
    url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 30.0
) -> PostgresBindingStore:
    """Connect to ``url``, apply pending migrations, and return an open store.

    ``timeout`` bounds connecting and each wait for a pooled connection.
    Raises :class:`ConfigurationError` for a malformed URL or a changed
    migration and :class:`ProviderUnavailable` if the server cannot be
    reached; messages never contain the password.
    """
    shown = redact_conninfo(url)
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # ``from None``: libpq may quote the raw string, password included.
        raise ConfigurationError(
            f"malformed database URL {shown!r}: {redact(str(exc))}",
            hint="use postgresql://user:password@host:port/database",
        ) from None
    # One direct connection first: its error says why (refused, auth, no such
    # database), where a pool would only report a timeout.
    async with translate_errors(f"connecting to {shown}"):
        probe = await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(1, round(timeout))
        )
        await probe.close()
    pool: Pool = AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection,
        timeout=timeout,
        open=False,
        name="mango",
    )
    try:
        async with translate_errors(f"opening the pool for {shown}"):
            await pool.open(wait=True, timeout=timeout)
        async with translate_errors(f"migrating {shown}"):
            await apply_migrations(pool)
    except BaseException:
        await pool.close()
        raise
    return PostgresBindingStore(pool)
