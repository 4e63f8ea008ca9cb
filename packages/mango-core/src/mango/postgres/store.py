"""The PostgreSQL :class:`~mango.domain.ports.BindingStore`.

Every write that can race is decided by the database under the Session row
lock (``SELECT ... FOR UPDATE`` on ``mango_sessions``): intents, bindings,
the deletion fence and Session deletion all serialise on it. The lock is taken
in its own statement first, so the guarded statement that follows runs with a
snapshot that sees whatever the previous lock holder committed.

Rows are read by column name through mango's one converter
(:mod:`mango.postgres._rows`): a row the domain value cannot hold is an
:class:`~mango.domain.errors.InvalidInput` naming the field, never a guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Self

import attrs
import psycopg

from mango.domain.errors import ConfigurationError, PreconditionFailed, ProvisioningBlocked
from mango.domain.registry import new_namespace, validate_namespace
from mango.domain.values import (
    Binding,
    ProvisioningIntent,
    SandboxRef,
    SessionRecord,
    validate_session_id,
)
from mango.postgres._errors import translate_errors
from mango.postgres._rows import fetch_all, fetch_one, spec_document
from mango.postgres.fleet import BINDING_COLUMNS, FleetRows
from mango.postgres.schema import Pool

__all__ = ["PostgresBindingStore"]

# The binding's pause mark is projected onto the Session row (one read sees it).
_SESSION_COLUMNS = (
    "id AS session_id, created_at, deleting_at, (SELECT b.paused_at FROM mango_sandbox_bindings b"
    " WHERE b.session_id = mango_sessions.id) AS paused_at"
)
_SESSION = "SELECT " + _SESSION_COLUMNS + " FROM mango_sessions"  # noqa: S608 - constants
_INTENT = (
    "SELECT i.session_id, i.provider, i.spec, i.spec_hash, s.deleting_at IS NOT NULL AS deleting"
    " FROM mango_sandbox_provisioning_intents i JOIN mango_sessions s ON s.id = i.session_id"
)
_BINDING = "SELECT " + BINDING_COLUMNS + " FROM mango_sandbox_bindings"  # noqa: S608 - constants
_LOCK_SESSION = "SELECT deleting_at FROM mango_sessions WHERE id = %s FOR UPDATE"
_BINDING_REF_KEY = "mango_sandbox_bindings_ref_key"


@attrs.define
class PostgresBindingStore(FleetRows):
    """Sessions, provisioning intents and sandbox bindings in PostgreSQL.

    The fleet's methods (the limit, last use, idle eviction) come from
    :class:`~mango.postgres.fleet.FleetRows`.

    Built by :func:`open_store`; owns its pool and closes it in
    :meth:`aclose` (or on leaving ``async with``). Connection failures raise
    :class:`~mango.domain.errors.ProviderUnavailable` (retry).
    """

    _pool: Pool

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        await self._pool.close()

    @property
    def pool(self) -> Pool:
        """The connection pool, shared with the other tables' adapters (stored files)."""
        return self._pool

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    # -------------------------------------------------------------- deployment

    async def deployment_namespace(self) -> str:
        """This database's namespace: a random one inserted on first use, then always read back.

        Concurrent first callers race on one insert-if-absent; every one of
        them returns the value that won.
        """
        async with self._connection("reading the deployment namespace") as conn:
            await conn.execute(
                "INSERT INTO mango_deployment (namespace) VALUES (%s)"
                " ON CONFLICT (singleton) DO NOTHING",
                (new_namespace(),),
            )
            cursor = await conn.execute("SELECT namespace FROM mango_deployment")
            row = await cursor.fetchone()
        if row is None:
            raise ConfigurationError("the mango_deployment table has no row")
        return validate_namespace(row[0])

    # -------------------------------------------------------------- sessions

    async def ensure_session(self, session_id: str) -> SessionRecord:
        """Create the Session row if absent and return the stored row."""
        validate_session_id(session_id)
        async with self._connection("creating a session") as conn:
            # DO UPDATE (a no-op) rather than DO NOTHING so RETURNING always yields the stored row.
            record = await fetch_one(
                conn,
                "INSERT INTO mango_sessions (id) VALUES (%s)"  # noqa: S608 - constants
                " ON CONFLICT (id) DO UPDATE SET created_at = mango_sessions.created_at"
                " RETURNING " + _SESSION_COLUMNS,
                (session_id,),
                SessionRecord,
            )
        assert record is not None  # noqa: S101 - INSERT ... DO UPDATE RETURNING yields one row
        return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """Return the Session row, or None."""
        validate_session_id(session_id)
        async with self._connection("reading a session") as conn:
            return await fetch_one(conn, _SESSION + " WHERE id = %s", (session_id,), SessionRecord)

    async def list_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Sessions, oldest first (at most ``limit``; none if ``limit <= 0``)."""
        if limit <= 0:
            return []
        async with self._connection("listing sessions") as conn:
            return await fetch_all(
                conn, _SESSION + " ORDER BY created_at, id LIMIT %s", (limit,), SessionRecord
            )

    async def fence_session(self, session_id: str) -> SessionRecord | None:
        """Set the deletion fence (the first time wins); None if the Session does not exist."""
        validate_session_id(session_id)
        async with self._connection("fencing a session") as conn:
            return await fetch_one(
                conn,
                "UPDATE mango_sessions SET deleting_at = COALESCE(deleting_at, now())"  # noqa: S608
                " WHERE id = %s RETURNING " + _SESSION_COLUMNS,
                (session_id,),
                SessionRecord,
            )

    async def delete_session(self, session_id: str) -> bool:
        """Delete a fenced Session with no binding or intent left.

        Returns False if it was already gone; raises :class:`PreconditionFailed`
        if it is not fenced or still has a binding or an intent.
        """
        validate_session_id(session_id)
        try:
            async with self._connection("deleting a session") as conn, conn.transaction():
                cursor = await conn.execute(_LOCK_SESSION, (session_id,))
                locked = await cursor.fetchone()
                if locked is None:
                    return False
                if locked[0] is None:
                    raise PreconditionFailed(f"session {session_id!r} is not fenced for deletion")
                cursor = await conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM mango_sandbox_bindings WHERE session_id = %s),"
                    " EXISTS (SELECT 1 FROM mango_sandbox_provisioning_intents"
                    " WHERE session_id = %s)",
                    (session_id, session_id),
                )
                left = await cursor.fetchone()
                if left is not None and (left[0] or left[1]):
                    what = " and ".join(
                        name
                        for name, present in (
                            ("a sandbox binding", left[0]),
                            ("an intent", left[1]),
                        )
                        if present
                    )
                    raise PreconditionFailed(f"session {session_id!r} still has {what}")
                await conn.execute("DELETE FROM mango_sessions WHERE id = %s", (session_id,))
        except psycopg.errors.ForeignKeyViolation as exc:  # a row we did not see; never expected
            raise PreconditionFailed(
                f"session {session_id!r} still has rows referring to it"
            ) from exc
        return True

    async def list_deleting_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Fenced Sessions, oldest fence first (at most ``limit``)."""
        if limit <= 0:
            return []
        async with self._connection("listing deleting sessions") as conn:
            return await fetch_all(
                conn,
                _SESSION + " WHERE deleting_at IS NOT NULL ORDER BY deleting_at, id LIMIT %s",
                (limit,),
                SessionRecord,
            )

    async def referenced_providers(self) -> tuple[str, ...]:
        """Every provider a binding or an intent names, sorted: each needs a worker."""
        async with self._connection("listing the providers sessions use") as conn:
            cursor = await conn.execute(
                "SELECT provider FROM mango_sandbox_bindings"
                " UNION SELECT provider FROM mango_sandbox_provisioning_intents ORDER BY 1"
            )
            return tuple(str(row[0]) for row in await cursor.fetchall())

    # --------------------------------------------------------------- intents

    async def get_intent(self, session_id: str) -> ProvisioningIntent | None:
        """Return the provisioning intent (``deleting`` projected), or None."""
        validate_session_id(session_id)
        async with self._connection("reading a provisioning intent") as conn:
            return await fetch_one(
                conn, _INTENT + " WHERE i.session_id = %s", (session_id,), ProvisioningIntent
            )

    async def put_intent(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        """Insert-if-absent; return the stored intent (which may differ from ``intent``).

        Raises :class:`ProvisioningBlocked` if the Session is absent, fenced or
        already bound.
        """
        session_id = intent.session_id
        async with self._connection("writing a provisioning intent") as conn, conn.transaction():
            cursor = await conn.execute(_LOCK_SESSION, (session_id,))
            locked = await cursor.fetchone()
            if locked is None:
                raise ProvisioningBlocked(f"session {session_id!r} does not exist")
            if locked[0] is not None:
                raise ProvisioningBlocked(f"session {session_id!r} is being deleted")
            stored = await fetch_one(
                conn,
                "INSERT INTO mango_sandbox_provisioning_intents"
                " (session_id, provider, spec, spec_hash)"
                " SELECT s.id, %s, %s, %s FROM mango_sessions s"
                " WHERE s.id = %s AND s.deleting_at IS NULL AND NOT EXISTS"
                " (SELECT 1 FROM mango_sandbox_bindings b WHERE b.session_id = s.id)"
                " FOR UPDATE OF s"
                " ON CONFLICT (session_id) DO UPDATE"
                " SET updated_at = mango_sandbox_provisioning_intents.updated_at"
                " RETURNING session_id, provider, spec, spec_hash, false AS deleting",
                (intent.provider, spec_document(intent.spec), intent.spec_hash, session_id),
                ProvisioningIntent,
            )
        if stored is None:
            raise ProvisioningBlocked(f"session {session_id!r} is already bound to a sandbox")
        return stored

    async def list_intents(self, provider: str, limit: int = 100) -> Sequence[ProvisioningIntent]:
        """That provider's intents, oldest first, with ``deleting`` projected."""
        if limit <= 0:
            return []
        async with self._connection("listing provisioning intents") as conn:
            return await fetch_all(
                conn,
                _INTENT + " WHERE i.provider = %s ORDER BY i.created_at, i.session_id LIMIT %s",
                (provider, limit),
                ProvisioningIntent,
            )

    async def delete_intent(self, intent: ProvisioningIntent) -> None:
        """Compare-and-delete on (session, provider, spec hash).

        Success if gone; :class:`PreconditionFailed` if a different intent is there.
        """
        async with self._connection("deleting a provisioning intent") as conn:
            cursor = await conn.execute(
                "DELETE FROM mango_sandbox_provisioning_intents"
                " WHERE session_id = %s AND provider = %s AND spec_hash = %s",
                (intent.session_id, intent.provider, intent.spec_hash),
            )
            if cursor.rowcount:
                return
            cursor = await conn.execute(
                "SELECT provider, spec_hash FROM mango_sandbox_provisioning_intents"
                " WHERE session_id = %s",
                (intent.session_id,),
            )
            other = await cursor.fetchone()
        if other is not None:
            raise PreconditionFailed(
                f"provisioning intent of session {intent.session_id!r} changed from "
                f"{intent.provider}/{intent.spec_hash} to {other[0]}/{other[1]}"
            )

    # -------------------------------------------------------------- bindings

    async def get_binding(self, session_id: str) -> Binding | None:
        """Return the binding, or None."""
        validate_session_id(session_id)
        async with self._connection("reading a sandbox binding") as conn:
            return await fetch_one(
                conn, _BINDING + " WHERE session_id = %s", (session_id,), Binding
            )

    async def put_binding(self, binding: Binding) -> Binding:
        """Insert-if-absent and delete the Session's intent in one transaction.

        Returns the winner, which may be another worker's binding. Raises
        :class:`ProvisioningBlocked` if the Session does not exist and
        :class:`PreconditionFailed` if the reference is bound to another Session.
        """
        session_id, ref = binding.session_id, binding.ref
        try:
            async with self._connection("writing a sandbox binding") as conn, conn.transaction():
                cursor = await conn.execute(_LOCK_SESSION, (session_id,))
                if await cursor.fetchone() is None:
                    raise ProvisioningBlocked(f"session {session_id!r} does not exist")
                stored = await fetch_one(
                    conn,
                    "INSERT INTO mango_sandbox_bindings"  # noqa: S608 - constants
                    " (session_id, provider, external_id, spec_hash) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (session_id) DO UPDATE"
                    " SET updated_at = mango_sandbox_bindings.updated_at"
                    " RETURNING " + BINDING_COLUMNS,
                    (session_id, ref.provider, ref.external_id, binding.spec_hash),
                    Binding,
                )
                await conn.execute(
                    "DELETE FROM mango_sandbox_provisioning_intents WHERE session_id = %s",
                    (session_id,),
                )
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != _BINDING_REF_KEY:
                raise
            raise PreconditionFailed(f"{ref} is bound to another session") from exc
        assert stored is not None  # noqa: S101 - INSERT ... DO UPDATE RETURNING yields one row
        return stored

    async def delete_binding(self, binding: Binding) -> None:
        """Compare-and-delete on (session, provider, external id).

        Success if gone; :class:`PreconditionFailed` if a different binding is there.
        """
        ref = binding.ref
        async with self._connection("deleting a sandbox binding") as conn:
            cursor = await conn.execute(
                "DELETE FROM mango_sandbox_bindings"
                " WHERE session_id = %s AND provider = %s AND external_id = %s",
                (binding.session_id, ref.provider, ref.external_id),
            )
            if cursor.rowcount:
                return
            cursor = await conn.execute(
                "SELECT provider, external_id FROM mango_sandbox_bindings WHERE session_id = %s",
                (binding.session_id,),
            )
            other = await cursor.fetchone()
        if other is not None:
            raise PreconditionFailed(
                f"binding of session {binding.session_id!r} changed from {ref} "
                f"to {other[0]}:{other[1]}"
            )

    async def mark_binding_lost(self, session_id: str, ref: SandboxRef) -> Binding | None:
        """Persist that ``ref``, bound to ``session_id``, no longer exists; idempotent.

        Compare-and-set on (session, provider, external id); the first mark's
        time is kept. Returns the stored binding, or None if the Session is no
        longer bound to ``ref`` (or the idle eviction took it: that is no loss).
        A lost resource is paused no more: the pause mark goes with the loss.
        """
        validate_session_id(session_id)
        async with self._connection("marking a sandbox binding lost") as conn:
            return await fetch_one(
                conn,
                "UPDATE mango_sandbox_bindings"  # noqa: S608 - constants
                " SET lost_at = COALESCE(lost_at, now()), updated_at = now(),"
                " paused_at = NULL, pause_finished_at = NULL"
                " WHERE session_id = %s AND provider = %s AND external_id = %s"
                " AND evicted_at IS NULL"
                " RETURNING " + BINDING_COLUMNS,
                (session_id, ref.provider, ref.external_id),
                Binding,
            )
