"""The PostgreSQL :class:`~mango.domain.fleet.SessionClaims`: what the rows claim.

A Session's ownership label is ``sha256(session id)`` cut to 16 bytes, which
PostgreSQL computes itself (``sha256`` is built in since version 11), so the
sweep asks one question for a whole listing and never reads Session ids out.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from mango.domain.values import OwnedResource, SandboxRef
from mango.postgres._errors import translate_errors
from mango.postgres.schema import Pool

__all__ = ["PostgresSessionClaims"]

# The same hash as mango.domain.hashing.session_key_hash(id, 32).
_SESSION_HASH = "encode(substring(sha256(convert_to(id, 'UTF8')) from 1 for 16), 'hex')"
_CLAIMED_HASHES = (
    f"SELECT h FROM (SELECT {_SESSION_HASH} AS h FROM mango_sessions) s"  # noqa: S608
    " WHERE h = ANY(%s)"
)
_BOUND_IDS = (
    "SELECT external_id FROM mango_sandbox_bindings WHERE provider = %s AND external_id = ANY(%s)"
)


@attrs.frozen
class PostgresSessionClaims:
    """Claims read from ``mango_sessions`` and ``mango_sandbox_bindings`` on a shared pool."""

    _pool: Pool

    async def claimed(
        self, provider: str, resources: Sequence[OwnedResource]
    ) -> frozenset[SandboxRef]:
        """The refs a binding names or whose session hash is a Session row's."""
        if not resources:
            return frozenset()
        hashes = sorted({r.session_hash for r in resources})
        ids = sorted({r.ref.external_id for r in resources if r.ref.provider == provider})
        async with (
            translate_errors("reading which sandboxes Sessions claim"),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            # One snapshot for both questions.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor = await conn.execute(_CLAIMED_HASHES, (hashes,))
            owned = {row[0] for row in await cursor.fetchall()}
            cursor = await conn.execute(_BOUND_IDS, (provider, ids))
            bound = {row[0] for row in await cursor.fetchall()}
        return frozenset(
            r.ref
            for r in resources
            if r.session_hash in owned
            or (r.ref.provider == provider and r.ref.external_id in bound)
        )
