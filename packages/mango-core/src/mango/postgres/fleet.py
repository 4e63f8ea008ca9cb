"""The fleet's rows: places under ``MANGO_MAX_SANDBOXES``, last use, idle eviction.

:class:`FleetRows` is the part of :class:`~mango.postgres.store.PostgresBindingStore`
that operates the fleet as a whole (migration ``0005_fleet``).

The limit is race-free because the count and the reservation are one
decision: :meth:`FleetRows.reserve_slot` takes a transaction-scoped advisory
lock (:data:`ADMISSION_LOCK_KEY`), so reservations are serialised across
every process on the database, and counts the live sandboxes in one
statement (one snapshot: an intent becoming a binding is one commit, seen
as either, never as neither or both) before it marks the intent. The lock
is released at commit, after the reservation is visible to the next holder.
Nothing else takes the lock, so it adds no wait to any other write, and
with no limit configured it is not taken at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg

from mango.domain.errors import FleetFull
from mango.domain.values import Binding, ProvisioningIntent, SandboxRef, validate_session_id
from mango.postgres._rows import fetch_all, fetch_one

__all__ = ["ADMISSION_LOCK_KEY", "BINDING_COLUMNS", "FleetRows"]

ADMISSION_LOCK_KEY = 0x6D616E676F_0002
"""The ``pg_advisory_xact_lock`` key that serialises reservations ("mango", 2)."""

_EVICTION = (
    "CASE WHEN evicted_at IS NULL THEN NULL ELSE json_build_object("
    "'at', evicted_at,"
    " 'idle_seconds', extract(epoch FROM evicted_at - last_used_at)::float8,"
    " 'finished', eviction_finished_at IS NOT NULL) END AS eviction"
)
BINDING_COLUMNS = (
    "session_id, spec_hash, lost_at, paused_at, pause_finished_at IS NOT NULL AS pause_finished,"
    " json_build_object('provider', provider, 'external_id', external_id) AS ref, " + _EVICTION
)
"""A binding row's columns, named after :class:`~mango.domain.values.Binding`'s fields."""

# One statement, so one snapshot. An eviction counts until its destroy finished.
_LIVE = (
    "SELECT (SELECT count(*) FROM mango_sandbox_bindings WHERE lost_at IS NULL"
    " AND (evicted_at IS NULL OR eviction_finished_at IS NULL))"
    " + (SELECT count(*) FROM mango_sandbox_provisioning_intents WHERE reserved_at IS NOT NULL)"
)
# Statements are assembled from the constants above only (no value is ever
# formatted into SQL; every value is a parameter), hence the S608 waivers.
_THIS_INTENT = " WHERE session_id = %s AND provider = %s AND spec_hash = %s"
_THIS_BINDING = " WHERE session_id = %s AND provider = %s AND external_id = %s"
_NOT_FENCED = (
    " AND EXISTS (SELECT 1 FROM mango_sessions s"
    " WHERE s.id = mango_sandbox_bindings.session_id AND s.deleting_at IS NULL)"
)
_INTENT_RESERVED = (
    "SELECT reserved_at IS NOT NULL FROM mango_sandbox_provisioning_intents"  # noqa: S608
    + _THIS_INTENT
    + " FOR UPDATE"
)
_DELETE_INTENT = "DELETE FROM mango_sandbox_provisioning_intents" + _THIS_INTENT  # noqa: S608
_RESERVE = (
    "UPDATE mango_sandbox_provisioning_intents SET reserved_at = now()"  # noqa: S608
    + _THIS_INTENT
)
_MARK_RESERVED = (
    "UPDATE mango_sandbox_provisioning_intents"  # noqa: S608
    " SET reserved_at = COALESCE(reserved_at, now())" + _THIS_INTENT
)
_RECORD_USE = (
    "UPDATE mango_sandbox_bindings SET last_used_at = greatest(last_used_at, now())"  # noqa: S608
    + _THIS_BINDING
    + " AND evicted_at IS NULL AND paused_at IS NULL"
)
_LIST_IDLE = (
    "SELECT " + BINDING_COLUMNS + " FROM mango_sandbox_bindings"  # noqa: S608
    " WHERE provider = %s AND lost_at IS NULL" + _NOT_FENCED + " AND ("
    "(evicted_at IS NULL AND paused_at IS NULL"
    " AND last_used_at <= now() - make_interval(secs => %s))"
    " OR (evicted_at IS NOT NULL AND eviction_finished_at IS NULL)"
    " OR (evicted_at IS NULL AND paused_at IS NOT NULL AND pause_finished_at IS NULL))"
    " ORDER BY COALESCE(evicted_at, paused_at, last_used_at), session_id LIMIT %s"
)
_MARK_EVICTED = (
    "UPDATE mango_sandbox_bindings SET evicted_at = now(), updated_at = now()"  # noqa: S608
    + _THIS_BINDING
    + " AND lost_at IS NULL AND evicted_at IS NULL AND paused_at IS NULL"
    " AND last_used_at <= now() - make_interval(secs => %s)"
    + _NOT_FENCED
    + " RETURNING "
    + BINDING_COLUMNS
)
# The pause mark: idempotent, the first time kept; the idle variant is the
# eviction's compare-and-set on the same row as record_use.
_MARK_PAUSED = (
    "UPDATE mango_sandbox_bindings"  # noqa: S608
    " SET paused_at = COALESCE(paused_at, now()), updated_at = now()"
    + _THIS_BINDING
    + " AND lost_at IS NULL AND evicted_at IS NULL"
    + _NOT_FENCED
    + " RETURNING "
    + BINDING_COLUMNS
)
_MARK_PAUSED_IDLE = (
    "UPDATE mango_sandbox_bindings SET paused_at = now(), updated_at = now()"  # noqa: S608
    + _THIS_BINDING
    + " AND lost_at IS NULL AND evicted_at IS NULL AND paused_at IS NULL"
    " AND last_used_at <= now() - make_interval(secs => %s)"
    + _NOT_FENCED
    + " RETURNING "
    + BINDING_COLUMNS
)
_FINISH_PAUSE = (
    "UPDATE mango_sandbox_bindings"  # noqa: S608
    " SET pause_finished_at = COALESCE(pause_finished_at, now())"
    + _THIS_BINDING
    + " AND paused_at IS NOT NULL"
)
_CLEAR_PAUSED = (
    "UPDATE mango_sandbox_bindings"  # noqa: S608
    " SET paused_at = NULL, pause_finished_at = NULL, updated_at = now()"
    + _THIS_BINDING
    + " AND paused_at IS NOT NULL"
)
_FINISH_EVICTION = (
    "UPDATE mango_sandbox_bindings"  # noqa: S608
    " SET eviction_finished_at = COALESCE(eviction_finished_at, now())"
    + _THIS_BINDING
    + " AND evicted_at IS NOT NULL"
)


class FleetRows:
    """The fleet methods of the BindingStore port, on the store's pool."""

    def _connection(self, action: str) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        raise NotImplementedError  # pragma: no cover - PostgresBindingStore provides it

    async def reserve_slot(self, intent: ProvisioningIntent, limit: int | None) -> bool:
        """Let ``intent`` take one of ``limit`` places; :class:`FleetFull` removes it instead.

        True if it holds a place (now or before), False if the stored intent
        is gone or differs. With no limit the place is only marked.
        """
        key = (intent.session_id, intent.provider, intent.spec_hash)
        if limit is None:  # nothing to count: one statement marks the place
            async with self._connection("reserving a sandbox place") as conn:
                cursor = await conn.execute(_MARK_RESERVED, key)
                return bool(cursor.rowcount)
        full = False
        async with self._connection("reserving a sandbox place") as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADMISSION_LOCK_KEY,))
            cursor = await conn.execute(_INTENT_RESERVED, key)
            row = await cursor.fetchone()
            if row is None:
                return False
            if row[0]:
                return True
            cursor = await conn.execute(_LIVE)
            counted = await cursor.fetchone()
            full = counted is not None and counted[0] >= limit
            if full:
                # Nothing was created for it: the refused acquire leaves no intent.
                await conn.execute(_DELETE_INTENT, key)
            else:
                await conn.execute(_RESERVE, key)
        if full:  # raised after the commit, which removed the intent
            raise FleetFull(limit, provider=intent.provider)
        return True

    async def live_sandboxes(self) -> int:
        """Places taken: bindings neither lost nor evicted (destroy finished), reserved intents."""
        async with self._connection("counting live sandboxes") as conn:
            cursor = await conn.execute(_LIVE)
            row = await cursor.fetchone()
        return 0 if row is None else int(row[0])

    async def record_use(self, session_id: str, ref: SandboxRef) -> bool:
        """Note the use of ``ref`` now; False if no longer bound to it, evicted or paused."""
        validate_session_id(session_id)
        async with self._connection("recording a sandbox's use") as conn:
            cursor = await conn.execute(_RECORD_USE, (session_id, ref.provider, ref.external_id))
            return bool(cursor.rowcount)

    async def list_idle(
        self, provider: str, idle_for: float, limit: int = 100
    ) -> Sequence[Binding]:
        """That provider's bindings unused for ``idle_for`` seconds, and unfinished evictions."""
        if limit <= 0:
            return []
        async with self._connection("listing idle sandboxes") as conn:
            return await fetch_all(
                conn,
                _LIST_IDLE,
                (provider, float(idle_for), limit),
                Binding,
            )

    async def mark_evicted(
        self, session_id: str, ref: SandboxRef, idle_for: float
    ) -> Binding | None:
        """Compare-and-set the eviction mark on a binding still unused for ``idle_for``."""
        validate_session_id(session_id)
        async with self._connection("marking a sandbox evicted") as conn:
            return await fetch_one(
                conn,
                _MARK_EVICTED,
                (session_id, ref.provider, ref.external_id, float(idle_for)),
                Binding,
            )

    async def finish_eviction(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the evicted resource was destroyed; idempotent."""
        validate_session_id(session_id)
        async with self._connection("finishing a sandbox's eviction") as conn:
            await conn.execute(_FINISH_EVICTION, (session_id, ref.provider, ref.external_id))

    async def mark_paused(
        self, session_id: str, ref: SandboxRef, *, idle_for: float | None = None
    ) -> Binding | None:
        """Set the pause mark (idempotent); with ``idle_for``, compare-and-set on the last use."""
        validate_session_id(session_id)
        key = (session_id, ref.provider, ref.external_id)
        async with self._connection("marking a sandbox paused") as conn:
            if idle_for is None:
                return await fetch_one(conn, _MARK_PAUSED, key, Binding)
            return await fetch_one(conn, _MARK_PAUSED_IDLE, (*key, float(idle_for)), Binding)

    async def finish_pause(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the provider confirmed the pause; idempotent."""
        validate_session_id(session_id)
        async with self._connection("finishing a sandbox's pause") as conn:
            await conn.execute(_FINISH_PAUSE, (session_id, ref.provider, ref.external_id))

    async def clear_paused(self, session_id: str, ref: SandboxRef) -> None:
        """Remove the pause mark (the provider resumed the resource); idempotent."""
        validate_session_id(session_id)
        async with self._connection("clearing a sandbox's pause") as conn:
            await conn.execute(_CLEAR_PAUSED, (session_id, ref.provider, ref.external_id))
