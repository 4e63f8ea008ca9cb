"""Memory Stores: durable, cross-Session text files whose every change is a version.

A Memory Store holds at most :data:`MAX_MEMORY_FILES` memories (UTF-8 text
files of at most :data:`MAX_MEMORY_CONTENT_BYTES` bytes at clean absolute paths such
as ``/notes/today.md``). Each memory has a *head* (its current path and
content) and an immutable history of versions (``created``, ``modified``,
``deleted``), each saying who made it: an ``api_actor`` (a write outside any
sandbox), a ``session_actor`` (a sandbox's writeback, with the Session id) or
a ``user_actor``.

A Session attaches up to :data:`MAX_SESSION_MEMORY_STORES` stores when it is
created, each ``read_only`` or ``read_write``, at
``/mnt/memory/<slug>`` (:func:`memory_slug` of the store's name then; a later
rename would not move the mount). The attachment is a
:class:`MemoryStoreMount` in the Session's :class:`~mango.domain.values.SandboxSpec`,
so the sandbox has the mount from its creation.

The writeback of a sandbox's changes is :func:`plan_sync`, a pure function
of three lists: the *baseline* (what the mount held after its last refresh:
memory ids and SHA-256, never content), the *current* files of the mount and
the store's *heads*. A change against a baseline that another writer changed
meanwhile is :class:`~mango.domain.errors.MemoryConflict` naming the path,
never a silent overwrite; an unchanged file costs nothing; repeating a
writeback that already committed changes nothing (idempotent). Both
repositories (in memory, PostgreSQL) apply its plan in one transaction.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import attrs

from mango.domain.errors import InvalidInput, InvalidMemory, MemoryConflict

__all__ = [
    "MAX_MEMORY_CONTENT_BYTES",
    "MAX_MEMORY_FILES",
    "MAX_MEMORY_PATH_BYTES",
    "MAX_SESSION_MEMORY_STORES",
    "MEMORY_ROOT",
    "Actor",
    "ActorType",
    "BaselineEntry",
    "MemoryAccess",
    "MemoryFile",
    "MemoryHead",
    "MemoryOperation",
    "MemoryRepository",
    "MemorySnapshot",
    "MemoryStore",
    "MemoryStoreMount",
    "MemoryVersion",
    "SyncPlan",
    "check_files",
    "check_memory_content",
    "check_store_name",
    "content_sha256",
    "memory_slug",
    "nesting_clash",
    "new_memory_id",
    "new_store_id",
    "new_version_id",
    "parse_attachment",
    "plan_sync",
    "refuse_nesting",
    "validate_memory_path",
    "validate_store_id",
]

MAX_MEMORY_FILES = 2000
"""Memories one store holds at most (and files a mount may hold)."""
MAX_MEMORY_CONTENT_BYTES = 102_400
"""Bytes of one memory's content at most (100 KiB)."""
MAX_MEMORY_PATH_BYTES = 1024
MAX_SESSION_MEMORY_STORES = 8
MEMORY_ROOT = "/mnt/memory"
"""Where a Session's stores are mounted, one directory per store slug."""
_MAX_NAME_BYTES = 255
_STORE_ID_PREFIX = "memstore-"


class MemoryAccess(enum.StrEnum):
    """How a Session may use an attached store."""

    READ_ONLY = "read_only"
    """A read-only bind mount (even to root in the sandbox); never written back."""
    READ_WRITE = "read_write"


class ActorType(enum.StrEnum):
    """Who made a version."""

    API_ACTOR = "api_actor"
    SESSION_ACTOR = "session_actor"
    USER_ACTOR = "user_actor"


class MemoryOperation(enum.StrEnum):
    """What a version did to its memory."""

    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"


@attrs.frozen
class Actor:
    """A version's author: its type and id (a Session id for ``session_actor``)."""

    type: ActorType = attrs.field(converter=ActorType)
    id: str

    def __attrs_post_init__(self) -> None:
        if not self.id or len(self.id.encode("utf-8")) > _MAX_NAME_BYTES or _has_control(self.id):
            raise InvalidInput(f"actor id {self.id!r} must be 1 to 255 bytes without controls")

    @classmethod
    def api(cls, actor_id: str = "api") -> Actor:
        """A write outside any sandbox (the Python API, the command line)."""
        return cls(ActorType.API_ACTOR, actor_id)

    @classmethod
    def session(cls, session_id: str) -> Actor:
        """A sandbox's writeback for ``session_id``."""
        return cls(ActorType.SESSION_ACTOR, session_id)


def _random_id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


def new_store_id() -> str:
    """A fresh store id, ``memstore-<32 hex>``."""
    return _random_id(_STORE_ID_PREFIX)


def new_memory_id() -> str:
    """A fresh memory id (one per head; a rename is a new memory)."""
    return _random_id("mem-")


def new_version_id() -> str:
    """A fresh version id."""
    return _random_id("memver-")


def validate_store_id(store_id: str) -> str:
    """``store_id`` if it is a store id, else :class:`InvalidInput`."""
    hexpart = store_id[len(_STORE_ID_PREFIX) :] if isinstance(store_id, str) else ""
    if (
        not isinstance(store_id, str)
        or not store_id.startswith(_STORE_ID_PREFIX)
        or len(hexpart) != 32
        or any(c not in "0123456789abcdef" for c in hexpart)
    ):
        raise InvalidInput(
            f"{store_id!r} is not a memory store id (memstore-<32 hex>)",
            hint="list the memory stores with 'mango memory ls'",
        )
    return store_id


def _has_control(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cf") for c in text)


def check_store_name(name: str) -> str:
    """``name`` if it may name a store (1 to 255 bytes, no controls, a non-empty slug)."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise InvalidInput("a memory store name must be 1 to 255 bytes")
    if _has_control(name):
        raise InvalidInput(f"memory store name {name!r} contains control characters")
    memory_slug(name)
    return name


def memory_slug(name: str) -> str:
    """The mount directory of a store named ``name``: ``/mnt/memory/<slug>``.

    Lowercased; letters and digits kept; each run of other characters one
    ``-``; a trailing ``-`` trimmed. :class:`InvalidInput` if nothing is left
    or it is over 255 bytes.
    """
    out: list[str] = []
    for char in name.lower():
        if char.isalpha() or char.isdigit():
            out.append(char)
        elif not out or out[-1] != "-":
            out.append("-")
    slug = "".join(out).rstrip("-")
    if not slug or len(slug.encode("utf-8")) > _MAX_NAME_BYTES:
        raise InvalidInput(
            f"memory store name {name!r} gives no usable mount directory "
            "(it needs a letter or digit, and at most 255 bytes)"
        )
    return slug


def validate_memory_path(path: str) -> str:
    """``path`` if it is a memory path, else :class:`InvalidMemory` naming it.

    UTF-8 in NFC, starting with ``/`` and more than ``/``, at most 1024
    bytes, already clean (no empty, ``.`` or ``..`` component, no trailing
    ``/``), each component at most 255 bytes, no control or format character.
    """
    if not isinstance(path, str):
        raise InvalidMemory(f"memory path {path!r} is not text", path=repr(path))
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidMemory(f"memory path {path!r} is not UTF-8", path=repr(path)) from None
    reason = None
    if not path.startswith("/") or path == "/":
        reason = "must start with '/' and name a file"
    elif size > MAX_MEMORY_PATH_BYTES:
        reason = f"is longer than {MAX_MEMORY_PATH_BYTES} bytes"
    elif _has_control(path):
        reason = "contains control or format characters"
    elif unicodedata.normalize("NFC", path) != path:
        reason = "is not in Unicode normal form C"
    elif any(part in ("", ".", "..") for part in path[1:].split("/")):
        reason = "is not clean (an empty, '.' or '..' component)"
    elif any(len(part.encode("utf-8")) > _MAX_NAME_BYTES for part in path[1:].split("/")):
        reason = "has a component longer than 255 bytes"
    if reason is not None:
        raise InvalidMemory(f"memory path {path!r} {reason}", path=path)
    return path


def content_sha256(content: str) -> str:
    """The lowercase hex SHA-256 of ``content``'s UTF-8 bytes."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_memory_content(path: str, data: bytes | str) -> str:
    """``data`` as text if it may be the content of the memory at ``path``.

    At most :data:`MAX_MEMORY_CONTENT_BYTES` bytes of UTF-8 without NUL, else
    :class:`InvalidMemory` naming ``path``.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_MEMORY_CONTENT_BYTES:
        raise InvalidMemory(
            f"memory {path!r} has {len(raw)} bytes, more than the "
            f"{MAX_MEMORY_CONTENT_BYTES} a memory may hold",
            path=path,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMemory(f"memory {path!r} is not UTF-8 text", path=path) from None
    if "\x00" in text:
        raise InvalidMemory(f"memory {path!r} contains a NUL character", path=path)
    return text


# ------------------------------------------------------------------ values


@attrs.frozen
class MemoryStore:
    """One store: its id, name, slug (its mount directory) and whether it is archived."""

    store_id: str
    name: str
    slug: str
    created_at: datetime
    description: str = ""
    archived_at: datetime | None = None

    @property
    def archived(self) -> bool:
        """Archived stores are read-only (no write, no writeback)."""
        return self.archived_at is not None


@attrs.frozen
class MemoryHead:
    """A memory's current state: its id, path, content and latest version."""

    memory_id: str
    store_id: str
    path: str
    content: str
    sha256: str
    version_id: str
    updated_at: datetime

    @property
    def size(self) -> int:
        """Bytes of the content."""
        return len(self.content.encode("utf-8"))


@attrs.frozen
class MemoryVersion:
    """One immutable version: what it did, its content then (none for ``deleted``), its actor."""

    version_id: str
    memory_id: str
    store_id: str
    operation: MemoryOperation = attrs.field(converter=MemoryOperation)
    path: str
    content: str | None
    sha256: str | None
    size: int | None
    created_at: datetime
    actor: Actor
    redacted_at: datetime | None = None
    redacted_by: Actor | None = None


@attrs.frozen
class MemoryStoreMount:
    """A store attached to a Session: its mount in the sandbox, part of the spec."""

    store_id: str
    slug: str
    access: MemoryAccess = attrs.field(default=MemoryAccess.READ_WRITE, converter=MemoryAccess)

    def __attrs_post_init__(self) -> None:
        validate_store_id(self.store_id)
        if memory_slug(self.slug) != self.slug:
            raise InvalidInput(f"{self.slug!r} is not a memory store slug")

    @property
    def runtime_path(self) -> str:
        """``/mnt/memory/<slug>``."""
        return f"{MEMORY_ROOT}/{self.slug}"

    @property
    def read_only(self) -> bool:
        """True for a ``read_only`` attachment."""
        return self.access is MemoryAccess.READ_ONLY


def parse_attachment(text: str) -> tuple[str, MemoryAccess]:
    """``STORE_ID[:read_only|read_write]`` (the command line's ``--memory``) parsed."""
    store_id, _, access = text.partition(":")
    try:
        chosen = MemoryAccess(access or MemoryAccess.READ_WRITE)
    except ValueError:
        raise InvalidInput(
            f"memory access {access!r} is neither 'read_only' nor 'read_write'"
        ) from None
    return validate_store_id(store_id), chosen


@attrs.frozen
class BaselineEntry:
    """One file of a mount's baseline: which memory it was and its digest then."""

    memory_id: str
    path: str
    sha256: str


@attrs.frozen
class MemoryFile:
    """A file as it is now: in a mount, or a head handed to a refresh (with its id)."""

    path: str
    content: str
    memory_id: str = ""

    @property
    def sha256(self) -> str:
        """The content's SHA-256."""
        return content_sha256(self.content)


@attrs.frozen
class MemorySnapshot:
    """What a mount holds: its baseline (if a refresh recorded one) and its current files."""

    initialized: bool
    baseline: tuple[BaselineEntry, ...]
    files: tuple[MemoryFile, ...]

    @property
    def changed(self) -> bool:
        """True if the files differ from the baseline (by path and digest)."""
        then = {entry.path: entry.sha256 for entry in self.baseline}
        now = {item.path: item.sha256 for item in self.files}
        return then != now


# ------------------------------------------------------------------ the writeback plan


@attrs.frozen
class SyncPlan:
    """What a writeback changes: heads to update, heads to delete, files to create."""

    updates: tuple[tuple[MemoryHead, MemoryFile], ...] = ()
    deletes: tuple[MemoryHead, ...] = ()
    creates: tuple[MemoryFile, ...] = ()

    @property
    def empty(self) -> bool:
        """True if nothing changes."""
        return not (self.updates or self.deletes or self.creates)


def _unique(paths: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise InvalidMemory(f"{what} names {path!r} twice", path=path)
        seen.add(path)


def nesting_clash(paths: Iterable[str]) -> tuple[str, str] | None:
    """``(parent, child)`` if one path is a directory of another (a file cannot be both)."""
    known = set(paths)
    for path in known:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in known:
                return parent, path
            parent = parent.rpartition("/")[0]
    return None


def refuse_nesting(path: str, others: Iterable[str]) -> None:
    """:class:`InvalidMemory` if a new memory at ``path`` would nest with one of ``others``."""
    clash = nesting_clash([path, *others])
    if clash is not None and path in clash:
        raise InvalidMemory(
            f"memory {path!r} and the memory {clash[0] if clash[1] == path else clash[1]!r} "
            "cannot both exist: one would be a directory of the other",
            path=path,
        )


def check_files(files: Sequence[MemoryFile]) -> None:
    """Every path valid and unique, none below another, contents within limits, at most 2000."""
    if len(files) > MAX_MEMORY_FILES:
        raise InvalidMemory(
            f"{len(files)} files, more than the {MAX_MEMORY_FILES} a memory store holds", path="/"
        )
    for item in files:
        validate_memory_path(item.path)
        check_memory_content(item.path, item.content)
    _unique((item.path for item in files), "the files")
    clash = nesting_clash(item.path for item in files)
    if clash is not None:
        raise InvalidMemory(
            f"memory {clash[1]!r} would be below the memory {clash[0]!r}, a file", path=clash[1]
        )


def plan_sync(
    baseline: Sequence[BaselineEntry],
    current: Sequence[MemoryFile],
    heads: Sequence[MemoryHead],
    *,
    archived: bool = False,
) -> SyncPlan:
    """The changes that take ``heads`` from ``baseline`` to ``current`` (see the module).

    :class:`MemoryConflict` naming the path when another writer changed what
    the baseline says; :class:`InvalidMemory` past a limit; :class:`InvalidInput`
    for a change to an archived store.
    """
    check_files(current)
    _unique((entry.path for entry in baseline), "the baseline")
    now = {item.path: item for item in current}
    by_id: Mapping[str, MemoryHead] = {head.memory_id: head for head in heads}
    by_path: Mapping[str, MemoryHead] = {head.path: head for head in heads}
    updates: list[tuple[MemoryHead, MemoryFile]] = []
    deletes: list[MemoryHead] = []
    creates: list[MemoryFile] = []
    for entry in baseline:
        step = _baseline_step(entry, now.get(entry.path), by_id.get(entry.memory_id))
        if isinstance(step, tuple):
            updates.append(step)
        elif step is not None:
            deletes.append(step)
    known = {entry.path for entry in baseline}
    for item in current:
        if item.path in known:
            continue
        head = by_path.get(item.path)
        if head is not None and head.sha256 == item.sha256:
            continue
        if head is not None:
            raise _conflict(item.path, "was created in another Session meanwhile")
        creates.append(item)
    plan = SyncPlan(tuple(updates), tuple(deletes), tuple(creates))
    if creates:
        gone = {head.memory_id for head in deletes}
        after = [h.path for h in heads if h.memory_id not in gone] + [c.path for c in creates]
        clash = nesting_clash(after)
        if clash is not None:
            raise _conflict(clash[1], f"clashes with {clash[0]!r}, created in another Session")
    if len(heads) - len(deletes) + len(creates) > MAX_MEMORY_FILES:
        raise InvalidMemory(f"the store would hold more than {MAX_MEMORY_FILES} memories", path="/")
    if archived and not plan.empty:
        raise InvalidInput(
            "archived memory stores are read-only", hint="write to a store that is not archived"
        )
    return plan


def _baseline_step(
    entry: BaselineEntry, local: MemoryFile | None, head: MemoryHead | None
) -> tuple[MemoryHead, MemoryFile] | MemoryHead | None:
    """What one baseline file asks for: an update, a delete (the head), or nothing."""
    if local is not None and local.sha256 == entry.sha256:
        return None
    unchanged = head is not None and head.path == entry.path and head.sha256 == entry.sha256
    if local is None:
        if head is None:
            return None  # deleted elsewhere too
        if not unchanged:
            raise _conflict(entry.path, "changed in another Session before its local deletion")
        return head
    if head is not None and head.path == entry.path and head.sha256 == local.sha256:
        return None  # this very change committed already (a retried writeback)
    if head is None or not unchanged:
        raise _conflict(entry.path, "changed in another Session before its local update")
    return (head, local)


def _conflict(path: str, what: str) -> MemoryConflict:
    return MemoryConflict(
        f"memory {path!r} {what}; the local change was not written back",
        path=path,
        hint="read the memory again (mango memory read) and make the change on top of it",
    )


# ------------------------------------------------------------------ the port


class MemoryRepository(Protocol):
    """Stores, heads, versions and Session attachments (PostgreSQL, or in memory for tests).

    Every write is one transaction: a writeback (:meth:`sync`) commits all
    of its versions or none.
    """

    async def create_store(self, store_id: str, name: str, description: str) -> MemoryStore:
        """Insert a store (its slug from ``name``)."""
        ...

    async def list_stores(self) -> Sequence[MemoryStore]:
        """Every store, newest first."""
        ...

    async def get_store(self, store_id: str) -> MemoryStore:
        """The store, or :class:`~mango.domain.errors.MemoryStoreNotFound`."""
        ...

    async def archive_store(self, store_id: str) -> MemoryStore:
        """Mark the store archived (read-only); idempotent."""
        ...

    async def heads(self, store_id: str) -> Sequence[MemoryHead]:
        """The store's heads, by path."""
        ...

    async def digests(self, store_id: str) -> Sequence[BaselineEntry]:
        """The heads' ids, paths and SHA-256 without their content, by path (cheap)."""
        ...

    async def write(self, store_id: str, path: str, content: str, actor: Actor) -> MemoryHead:
        """Create or modify the memory at ``path`` (no version if the content is the same)."""
        ...

    async def versions(self, store_id: str, path: str) -> Sequence[MemoryVersion]:
        """Every version ever made at ``path``, oldest first."""
        ...

    async def sync(
        self,
        store_id: str,
        baseline: Sequence[BaselineEntry],
        current: Sequence[MemoryFile],
        actor: Actor,
    ) -> Sequence[MemoryHead]:
        """Apply :func:`plan_sync` in one transaction under the store's lock; the new heads."""
        ...

    async def attach(self, session_id: str, mounts: Sequence[MemoryStoreMount]) -> None:
        """Record the Session's attachments (once, at its creation)."""
        ...

    async def attachments(self, session_id: str) -> Sequence[MemoryStoreMount]:
        """The Session's attachments, by slug."""
        ...

    async def detach_session(self, session_id: str) -> None:
        """Remove a deleted Session's attachments (the stores stay); idempotent."""
        ...
