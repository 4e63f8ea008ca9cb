"""Memory Stores for applications: create, list, archive; read, write, list versions.

:class:`MemoryStores` is the Python API (``manager.memory_stores``; the
command line's ``mango memory``) over a
:class:`~mango.domain.memories.MemoryRepository`: PostgreSQL in a deployment
(:class:`mango.postgres.memories.PostgresMemoryRepository`), or
:class:`InMemoryMemoryRepository` here, the fake that unit tests and plugin
authors use (one process, same rules, same plan). Reads and writes through
it are outside any sandbox: their versions are an ``api_actor``'s.

(Not to be confused with :mod:`mango.app.memory_store`, the in-memory
*BindingStore*.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import attrs

from mango.domain.errors import InvalidInput, InvalidMemory, MemoryStoreNotFound
from mango.domain.memories import (
    MAX_MEMORY_FILES,
    MAX_SESSION_MEMORY_STORES,
    Actor,
    BaselineEntry,
    MemoryAccess,
    MemoryFile,
    MemoryHead,
    MemoryOperation,
    MemoryRepository,
    MemoryStore,
    MemoryStoreMount,
    MemoryVersion,
    check_memory_content,
    check_store_name,
    content_sha256,
    memory_slug,
    new_memory_id,
    new_store_id,
    new_version_id,
    plan_sync,
    refuse_nesting,
    validate_memory_path,
    validate_store_id,
)

__all__ = ["InMemoryMemoryRepository", "MemoryStores"]


def _now() -> datetime:
    return datetime.now(UTC)


def _missing_memory(store_id: str, path: str) -> InvalidInput:
    return InvalidInput(
        f"memory store {store_id!r} has no memory at {path!r}",
        hint=f"write it first with 'mango memory write {store_id} {path}'",
    )


@attrs.define
class MemoryStores:
    """The Memory Store operations of the Python API; every input checked first."""

    repository: MemoryRepository

    async def create(self, name: str, *, description: str = "") -> MemoryStore:
        """Create a store named ``name`` (its mount directory: :func:`memory_slug` of it)."""
        check_store_name(name)
        if len(description.encode("utf-8")) > 4096:
            raise InvalidInput("a memory store description is at most 4096 bytes")
        return await self.repository.create_store(new_store_id(), name, description)

    async def list(self) -> Sequence[MemoryStore]:
        """Every store, newest first."""
        return await self.repository.list_stores()

    async def get(self, store_id: str) -> MemoryStore:
        """The store; :class:`MemoryStoreNotFound` if there is none."""
        return await self.repository.get_store(validate_store_id(store_id))

    async def archive(self, store_id: str) -> MemoryStore:
        """Archive the store: read-only from now on (idempotent)."""
        return await self.repository.archive_store(validate_store_id(store_id))

    async def write(
        self, store_id: str, path: str, content: str | bytes, *, actor: Actor | None = None
    ) -> MemoryHead:
        """Create or replace the memory at ``path`` (an ``api_actor`` version by default).

        :class:`InvalidMemory` naming the path past a limit; an archived
        store is :class:`InvalidInput`. The same content again makes no version.
        """
        validate_store_id(store_id)
        validate_memory_path(path)
        text = check_memory_content(path, content)
        return await self.repository.write(store_id, path, text, actor or Actor.api())

    async def read(self, store_id: str, path: str) -> MemoryHead:
        """The memory at ``path``; :class:`InvalidInput` if there is none."""
        validate_store_id(store_id)
        validate_memory_path(path)
        for head in await self.repository.heads(store_id):
            if head.path == path:
                return head
        await self.repository.get_store(store_id)  # a missing store says so
        raise _missing_memory(store_id, path)

    async def memories(self, store_id: str) -> Sequence[MemoryHead]:
        """The store's memories (heads), by path."""
        validate_store_id(store_id)
        await self.repository.get_store(store_id)
        return await self.repository.heads(store_id)

    async def versions(self, store_id: str, path: str) -> Sequence[MemoryVersion]:
        """Every version made at ``path``, oldest first (deleted ones included)."""
        validate_store_id(store_id)
        validate_memory_path(path)
        await self.repository.get_store(store_id)
        return await self.repository.versions(store_id, path)

    async def mounts(
        self, attachments: Sequence[tuple[str, MemoryAccess]]
    ) -> tuple[MemoryStoreMount, ...]:
        """The mounts of ``(store id, access)`` attachments: at most 8, distinct, not archived."""
        if len(attachments) > MAX_SESSION_MEMORY_STORES:
            raise InvalidInput(
                f"{len(attachments)} memory stores, more than the {MAX_SESSION_MEMORY_STORES} "
                "a Session may attach"
            )
        mounts: list[MemoryStoreMount] = []
        for store_id, access in attachments:
            store = await self.get(store_id)
            if store.archived and access is MemoryAccess.READ_WRITE:
                raise InvalidInput(
                    f"memory store {store_id!r} is archived: attach it read_only",
                    hint=f"--memory {store_id}:read_only",
                )
            mounts.append(MemoryStoreMount(store.store_id, store.slug, access))
        for what in ("store_id", "slug"):
            values = [getattr(mount, what) for mount in mounts]
            for value in values:
                if values.count(value) > 1:
                    raise InvalidInput(
                        f"two of the Session's memory stores share the {what} {value!r}",
                        hint="attach each store once; stores whose names give the same "
                        "mount directory cannot be attached together",
                    )
        return tuple(sorted(mounts, key=lambda mount: mount.slug))


@attrs.define
class _Store:
    store: MemoryStore
    heads: dict[str, MemoryHead] = attrs.field(factory=dict)  # by memory id
    versions: list[MemoryVersion] = attrs.field(factory=list)


@attrs.define
class InMemoryMemoryRepository:
    """A :class:`MemoryRepository` in one process's memory (tests, plugin authors)."""

    _stores: dict[str, _Store] = attrs.field(factory=dict, init=False)
    _sessions: dict[str, tuple[MemoryStoreMount, ...]] = attrs.field(factory=dict, init=False)
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    def _get(self, store_id: str) -> _Store:
        try:
            return self._stores[store_id]
        except KeyError:
            raise MemoryStoreNotFound(store_id) from None

    async def create_store(self, store_id: str, name: str, description: str) -> MemoryStore:
        """Insert a store."""
        store = MemoryStore(store_id, name, memory_slug(name), _now(), description)
        self._stores[store_id] = _Store(store)
        return store

    async def list_stores(self) -> Sequence[MemoryStore]:
        """Every store, newest first."""
        stores = [entry.store for entry in self._stores.values()]
        return sorted(stores, key=lambda s: (s.created_at, s.store_id), reverse=True)

    async def get_store(self, store_id: str) -> MemoryStore:
        """The store."""
        return self._get(store_id).store

    async def archive_store(self, store_id: str) -> MemoryStore:
        """Archive it (idempotent)."""
        entry = self._get(store_id)
        if entry.store.archived_at is None:
            entry.store = attrs.evolve(entry.store, archived_at=_now())
        return entry.store

    async def heads(self, store_id: str) -> Sequence[MemoryHead]:
        """The heads, by path."""
        return sorted(self._get(store_id).heads.values(), key=lambda head: head.path)

    async def digests(self, store_id: str) -> Sequence[BaselineEntry]:
        """The heads' ids, paths and digests."""
        return [BaselineEntry(h.memory_id, h.path, h.sha256) for h in await self.heads(store_id)]

    def _version(
        self,
        entry: _Store,
        memory_id: str,
        operation: MemoryOperation,
        path: str,
        *,
        content: str | None,
        actor: Actor,
        at: datetime,
    ) -> MemoryVersion:
        version = MemoryVersion(
            new_version_id(),
            memory_id,
            entry.store.store_id,
            operation,
            path,
            content,
            None if content is None else content_sha256(content),
            None if content is None else len(content.encode("utf-8")),
            at,
            actor,
        )
        entry.versions.append(version)
        return version

    def _put(self, entry: _Store, memory_id: str, path: str, content: str, version: str) -> None:
        entry.heads[memory_id] = MemoryHead(
            memory_id, entry.store.store_id, path, content, content_sha256(content), version, _now()
        )

    async def write(self, store_id: str, path: str, content: str, actor: Actor) -> MemoryHead:
        """Create or modify the memory at ``path``."""
        async with self._lock:
            entry = self._get(store_id)
            if entry.store.archived:
                raise InvalidInput("archived memory stores are read-only")
            found = next((h for h in entry.heads.values() if h.path == path), None)
            if found is not None and found.content == content:
                return found
            if found is None:
                refuse_nesting(path, [h.path for h in entry.heads.values()])
            if found is None and len(entry.heads) >= MAX_MEMORY_FILES:
                raise InvalidMemory(
                    f"the store holds {MAX_MEMORY_FILES} memories already", path=path
                )
            memory_id = found.memory_id if found is not None else new_memory_id()
            operation = MemoryOperation.MODIFIED if found else MemoryOperation.CREATED
            version = self._version(
                entry, memory_id, operation, path, content=content, actor=actor, at=_now()
            )
            self._put(entry, memory_id, path, content, version.version_id)
            return entry.heads[memory_id]

    async def versions(self, store_id: str, path: str) -> Sequence[MemoryVersion]:
        """Every version at ``path``, oldest first."""
        return [v for v in self._get(store_id).versions if v.path == path]

    async def sync(
        self,
        store_id: str,
        baseline: Sequence[BaselineEntry],
        current: Sequence[MemoryFile],
        actor: Actor,
    ) -> Sequence[MemoryHead]:
        """Apply the plan all at once (nothing changes if it raises)."""
        async with self._lock:
            entry = self._get(store_id)
            heads = list(entry.heads.values())
            plan = plan_sync(baseline, current, heads, archived=entry.store.archived)
            at = _now()
            for head, local in plan.updates:
                version = self._version(
                    entry, head.memory_id, MemoryOperation.MODIFIED, head.path,
                    content=local.content, actor=actor, at=at,
                )  # fmt: skip
                self._put(entry, head.memory_id, head.path, local.content, version.version_id)
            for head in plan.deletes:
                self._version(
                    entry, head.memory_id, MemoryOperation.DELETED, head.path,
                    content=None, actor=actor, at=at,
                )  # fmt: skip
                del entry.heads[head.memory_id]
            for local in plan.creates:
                memory_id = new_memory_id()
                version = self._version(
                    entry, memory_id, MemoryOperation.CREATED, local.path,
                    content=local.content, actor=actor, at=at,
                )  # fmt: skip
                self._put(entry, memory_id, local.path, local.content, version.version_id)
        return await self.heads(store_id)

    async def attach(self, session_id: str, mounts: Sequence[MemoryStoreMount]) -> None:
        """Record the attachments."""
        for mount in mounts:
            self._get(mount.store_id)
        if session_id in self._sessions and tuple(mounts) != self._sessions[session_id]:
            raise InvalidInput(f"session {session_id!r} has its memory stores already")
        self._sessions[session_id] = tuple(mounts)

    async def attachments(self, session_id: str) -> Sequence[MemoryStoreMount]:
        """The attachments, by slug."""
        return self._sessions.get(session_id, ())

    async def detach_session(self, session_id: str) -> None:
        """Forget them."""
        self._sessions.pop(session_id, None)
