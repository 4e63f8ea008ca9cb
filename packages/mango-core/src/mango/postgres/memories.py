"""Memory Stores in PostgreSQL (``mango_memory_stores``, ``mango_memories``, versions).

Every change to a store's memories runs in one transaction that first locks
the store's row (``SELECT ... FOR UPDATE``), then its heads, so two
writebacks (or a writeback and an API write) of one store never interleave:
the second sees the first's heads and fails with
:class:`~mango.domain.errors.MemoryConflict` where they changed the same
memory. A writeback's versions are inserted with ``executemany`` (pipelined:
a few round trips for the whole batch); a crash anywhere in the transaction
leaves nothing of it (PostgreSQL decides).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import attrs
import psycopg

from mango.domain.errors import InvalidInput, InvalidMemory, MemoryConflict, MemoryStoreNotFound
from mango.domain.memories import (
    MAX_MEMORY_FILES,
    Actor,
    BaselineEntry,
    MemoryAccess,
    MemoryFile,
    MemoryHead,
    MemoryOperation,
    MemoryStore,
    MemoryStoreMount,
    MemoryVersion,
    SyncPlan,
    content_sha256,
    memory_slug,
    new_memory_id,
    new_version_id,
    plan_sync,
    refuse_nesting,
)
from mango.postgres._errors import translate_errors
from mango.postgres.schema import Pool

__all__ = ["PostgresMemoryRepository", "SyncStep", "observe_syncs"]

_STORE = "id, name, slug, description, created_at, archived_at"
_HEAD = "id, memory_store_id, path, content, content_sha256, memory_version_id, updated_at"
_VERSION = (
    "id, memory_id, memory_store_id, operation, path, content, content_sha256,"
    " content_size_bytes, created_at, created_by_type, created_by_id, redacted_at,"
    " redacted_by_type, redacted_by_id"
)
_INSERT_VERSION = (
    "INSERT INTO mango_memory_versions (id, memory_store_id, memory_id, operation, path,"
    " content, content_size_bytes, content_sha256, created_at, created_by_type, created_by_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_INSERT_HEAD = (
    "INSERT INTO mango_memories (id, memory_store_id, memory_version_id, path, content,"
    " content_size_bytes, content_sha256, created_at, updated_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_UPDATE_HEAD = (
    "UPDATE mango_memories SET memory_version_id = %s, content = %s, content_size_bytes = %s,"
    " content_sha256 = %s, updated_at = %s WHERE id = %s"
)

SyncStep = Literal["versions-inserted"]
"""``versions-inserted``: a writeback's versions are inserted, its heads not yet changed."""
_observers: list[Callable[[SyncStep, str], None]] = []


def observe_syncs(observer: Callable[[SyncStep, str], None]) -> Callable[[], None]:
    """Call ``observer(step, store_id)`` inside every writeback transaction; return the undo.

    For crash-injection tests only: an observer that kills the process
    leaves exactly what a crash inside the transaction leaves (nothing).
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _store(row: Sequence[Any]) -> MemoryStore:
    return MemoryStore(row[0], row[1], row[2], row[4].astimezone(UTC), row[3], _utc(row[5]))


def _head(row: Sequence[Any]) -> MemoryHead:
    return MemoryHead(row[0], row[1], row[2], row[3], row[4], row[5], row[6].astimezone(UTC))


def _version(row: Sequence[Any]) -> MemoryVersion:
    redacted_by = None if row[12] is None else Actor(row[12], row[13])
    return MemoryVersion(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7],
        row[8].astimezone(UTC), Actor(row[9], row[10]), _utc(row[11]), redacted_by,
    )  # fmt: skip


def _size(content: str) -> int:
    return len(content.encode("utf-8"))


@attrs.define
class PostgresMemoryRepository:
    """The :class:`~mango.domain.memories.MemoryRepository` on a pool the caller owns."""

    _pool: Pool

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with translate_errors(action), self._pool.connection() as conn:
            yield conn

    async def create_store(self, store_id: str, name: str, description: str) -> MemoryStore:
        """Insert a store."""
        async with self._connection("creating a memory store") as conn:
            cursor = await conn.execute(
                "INSERT INTO mango_memory_stores (id, name, slug, description)"  # noqa: S608
                f" VALUES (%s, %s, %s, %s) RETURNING {_STORE}",
                (store_id, name, memory_slug(name), description),
            )
            row = await cursor.fetchone()
        assert row is not None  # noqa: S101 - INSERT ... RETURNING yields one row
        return _store(row)

    async def list_stores(self) -> Sequence[MemoryStore]:
        """Every store, newest first."""
        async with self._connection("listing memory stores") as conn:
            cursor = await conn.execute(
                f"SELECT {_STORE} FROM mango_memory_stores ORDER BY created_at DESC, id DESC"  # noqa: S608
            )
            return [_store(row) for row in await cursor.fetchall()]

    async def get_store(self, store_id: str) -> MemoryStore:
        """The store, or :class:`MemoryStoreNotFound`."""
        async with self._connection("reading a memory store") as conn:
            cursor = await conn.execute(
                f"SELECT {_STORE} FROM mango_memory_stores WHERE id = %s",  # noqa: S608
                (store_id,),
            )
            row = await cursor.fetchone()
        if row is None:
            raise MemoryStoreNotFound(store_id)
        return _store(row)

    async def archive_store(self, store_id: str) -> MemoryStore:
        """Archive it (idempotent: the first time stays)."""
        async with self._connection("archiving a memory store") as conn:
            cursor = await conn.execute(
                "UPDATE mango_memory_stores SET archived_at = coalesce(archived_at, now()),"  # noqa: S608
                f" updated_at = now() WHERE id = %s RETURNING {_STORE}",
                (store_id,),
            )
            row = await cursor.fetchone()
        if row is None:
            raise MemoryStoreNotFound(store_id)
        return _store(row)

    async def heads(self, store_id: str) -> Sequence[MemoryHead]:
        """The heads, by path."""
        async with self._connection("reading memories") as conn:
            return await self._heads(conn, store_id, lock=False)

    async def digests(self, store_id: str) -> Sequence[BaselineEntry]:
        """The heads' ids, paths and digests (no content), by path."""
        async with self._connection("reading memories") as conn:
            cursor = await conn.execute(
                "SELECT id, path, content_sha256 FROM mango_memories"
                " WHERE memory_store_id = %s ORDER BY path",
                (store_id,),
            )
            return [BaselineEntry(row[0], row[1], row[2]) for row in await cursor.fetchall()]

    async def _heads(
        self, conn: psycopg.AsyncConnection[Any], store_id: str, *, lock: bool
    ) -> list[MemoryHead]:
        cursor = await conn.execute(
            f"SELECT {_HEAD} FROM mango_memories WHERE memory_store_id = %s"  # noqa: S608
            " ORDER BY path" + (" FOR UPDATE" if lock else ""),
            (store_id,),
        )
        return [_head(row) for row in await cursor.fetchall()]

    async def _lock_store(self, conn: psycopg.AsyncConnection[Any], store_id: str) -> bool:
        """Lock the store's row; True if it is archived."""
        cursor = await conn.execute(
            "SELECT archived_at FROM mango_memory_stores WHERE id = %s FOR UPDATE", (store_id,)
        )
        row = await cursor.fetchone()
        if row is None:
            raise MemoryStoreNotFound(store_id)
        return row[0] is not None

    async def write(self, store_id: str, path: str, content: str, actor: Actor) -> MemoryHead:
        """Create or modify the memory at ``path`` in one transaction."""
        async with self._connection("writing a memory") as conn, conn.transaction():
            if await self._lock_store(conn, store_id):
                raise InvalidInput("archived memory stores are read-only")
            cursor = await conn.execute(
                f"SELECT {_HEAD} FROM mango_memories"  # noqa: S608
                " WHERE memory_store_id = %s AND path = %s FOR UPDATE",
                (store_id, path),
            )
            row = await cursor.fetchone()
            found = None if row is None else _head(row)
            if found is not None and found.content == content:
                return found
            if found is None:
                ancestors = [path[:i] for i in range(1, len(path)) if path[i] == "/"]
                cursor = await conn.execute(
                    "SELECT path FROM mango_memories WHERE memory_store_id = %s"
                    " AND (path = ANY(%s) OR starts_with(path, %s))",
                    (store_id, ancestors, path + "/"),
                )
                refuse_nesting(path, [row[0] for row in await cursor.fetchall()])
                cursor = await conn.execute(
                    "SELECT count(*) FROM mango_memories WHERE memory_store_id = %s", (store_id,)
                )
                counted = await cursor.fetchone()
                if counted is not None and counted[0] >= MAX_MEMORY_FILES:
                    raise InvalidMemory(
                        f"the store holds {MAX_MEMORY_FILES} memories already", path=path
                    )
            now = datetime.now(UTC)
            version_id = new_version_id()
            memory_id = found.memory_id if found is not None else new_memory_id()
            operation = MemoryOperation.MODIFIED if found else MemoryOperation.CREATED
            sha = content_sha256(content)
            await conn.execute(
                _INSERT_VERSION,
                (version_id, store_id, memory_id, operation.value, path, content,
                 _size(content), sha, now, actor.type.value, actor.id),
            )  # fmt: skip
            if found is None:
                await conn.execute(
                    _INSERT_HEAD,
                    (memory_id, store_id, version_id, path, content, _size(content), sha, now, now),
                )
            else:
                await conn.execute(
                    _UPDATE_HEAD, (version_id, content, _size(content), sha, now, memory_id)
                )
        return MemoryHead(memory_id, store_id, path, content, sha, version_id, now)

    async def versions(self, store_id: str, path: str) -> Sequence[MemoryVersion]:
        """Every version at ``path``, oldest first."""
        async with self._connection("reading memory versions") as conn:
            cursor = await conn.execute(
                f"SELECT {_VERSION} FROM mango_memory_versions"  # noqa: S608
                " WHERE memory_store_id = %s AND path = %s ORDER BY created_at, id",
                (store_id, path),
            )
            return [_version(row) for row in await cursor.fetchall()]

    async def sync(
        self,
        store_id: str,
        baseline: Sequence[BaselineEntry],
        current: Sequence[MemoryFile],
        actor: Actor,
    ) -> Sequence[MemoryHead]:
        """Apply the writeback plan in one transaction; the new heads (see the module)."""
        try:
            async with self._connection("writing memories back") as conn, conn.transaction():
                archived = await self._lock_store(conn, store_id)
                heads = await self._heads(conn, store_id, lock=True)
                plan = plan_sync(baseline, current, heads, archived=archived)
                if plan.empty:
                    return heads
                await self._apply(conn, store_id, plan, actor)
                return await self._heads(conn, store_id, lock=False)
        except psycopg.errors.UniqueViolation as exc:  # pragma: no cover - the row lock orders us
            raise MemoryConflict(
                f"a memory of store {store_id!r} was created concurrently", path="/"
            ) from exc

    async def _apply(
        self, conn: psycopg.AsyncConnection[Any], store_id: str, plan: SyncPlan, actor: Actor
    ) -> None:
        updates, deletes, creates = plan.updates, plan.deletes, plan.creates
        now = datetime.now(UTC)
        kind, who = actor.type.value, actor.id
        versions: list[tuple[Any, ...]] = []
        head_updates: list[tuple[Any, ...]] = []
        head_inserts: list[tuple[Any, ...]] = []
        for head, local in updates:
            version_id, sha, size = new_version_id(), local.sha256, _size(local.content)
            versions.append(
                (version_id, store_id, head.memory_id, "modified", head.path, local.content,
                 size, sha, now, kind, who)
            )  # fmt: skip
            head_updates.append((version_id, local.content, size, sha, now, head.memory_id))
        versions.extend(
            (new_version_id(), store_id, head.memory_id, "deleted", head.path, None,
             None, None, now, kind, who)
            for head in deletes
        )  # fmt: skip
        for local in creates:
            version_id, memory_id = new_version_id(), new_memory_id()
            sha, size = local.sha256, _size(local.content)
            versions.append(
                (version_id, store_id, memory_id, "created", local.path, local.content,
                 size, sha, now, kind, who)
            )  # fmt: skip
            head_inserts.append(
                (memory_id, store_id, version_id, local.path, local.content, size, sha, now, now)
            )
        async with conn.cursor() as cursor:
            await cursor.executemany(_INSERT_VERSION, versions)
            for observer in _observers:
                observer("versions-inserted", store_id)
            if deletes:
                await cursor.execute(
                    "DELETE FROM mango_memories WHERE id = ANY(%s)",
                    ([head.memory_id for head in deletes],),
                )
            if head_updates:
                await cursor.executemany(_UPDATE_HEAD, head_updates)
            if head_inserts:
                await cursor.executemany(_INSERT_HEAD, head_inserts)

    async def attach(self, session_id: str, mounts: Sequence[MemoryStoreMount]) -> None:
        """Record the attachments (idempotent for the same set; another set is refused)."""
        async with self._connection("attaching memory stores") as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT memory_store_id, slug, access FROM mango_session_memory_stores"
                " WHERE session_id = %s",
                (session_id,),
            )
            existing = {(row[0], row[1], row[2]) for row in await cursor.fetchall()}
            wanted = {(m.store_id, m.slug, m.access.value) for m in mounts}
            if existing:
                if existing != wanted:
                    raise InvalidInput(
                        f"session {session_id!r} has its memory stores already",
                        hint="memory stores are attached when a Session is created",
                    )
                return
            async with conn.cursor() as rows:
                await rows.executemany(
                    "INSERT INTO mango_session_memory_stores"
                    " (session_id, memory_store_id, slug, access) VALUES (%s, %s, %s, %s)",
                    [(session_id, m.store_id, m.slug, m.access.value) for m in mounts],
                )

    async def attachments(self, session_id: str) -> Sequence[MemoryStoreMount]:
        """The attachments, by slug."""
        async with self._connection("reading memory attachments") as conn:
            cursor = await conn.execute(
                "SELECT memory_store_id, slug, access FROM mango_session_memory_stores"
                " WHERE session_id = %s ORDER BY slug",
                (session_id,),
            )
            return [
                MemoryStoreMount(row[0], row[1], MemoryAccess(row[2]))
                for row in await cursor.fetchall()
            ]

    async def detach_session(self, session_id: str) -> None:
        """Remove the Session's attachments."""
        async with self._connection("detaching memory stores") as conn:
            await conn.execute(
                "DELETE FROM mango_session_memory_stores WHERE session_id = %s", (session_id,)
            )
