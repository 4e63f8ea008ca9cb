"""The file API (capability ``file-api``) over a sandbox daemon's own file calls.

(A provider whose daemon has exec and no file calls uses the exec fallback,
:class:`~mango.provider.fileapi.ExecFileSystem`, instead.)

Every daemon that offers list, stat, move, remove and mkdir offers them with
its own ideas of what a link is, whether a move overwrites, and how long a
listing may get. :class:`RemoteFileSystem` is the mixin that gives a remote
sandbox :class:`~mango.domain.sandbox_ports.FileSystemSandbox` from five
native calls, keeping every promise of that protocol the same way for every
provider:

* **the path policy first**: the lexical rules and the root decision
  (:meth:`~mango.provider.paths.PathPolicy.locate`), then every parent
  component classified through the sandbox's stat callback (a link or a file
  in a parent is refused, a missing parent is :class:`FileNotFoundError`),
  the last component through the native ``_entry_info``, which never follows it;
* **bounded listings**: the native listing is read entry by entry (a daemon
  that answers one JSON document is parsed as it arrives,
  :func:`~mango.provider.jsonstream.json_array_items`) and at most ``limit``
  entries are kept (the smallest paths; a listing known to arrive in name
  order stops after ``limit + 1``): memory O(limit), whatever the directory;
* **checks before the call** where the daemon would not keep the promise: a
  rename's destination is stat-ed (no daemon's move may overwrite), a
  directory's emptiness is listed before a non-recursive remove (daemons
  whose remove is always recursive), a ``make_dir`` walks its components
  (daemons whose mkdir follows links or makes parents regardless);
* the workspace root is never removed, renamed or renamed onto; a listing
  never shows the adapter's control directories.

**The remaining window.** The checks and the call are two requests: a
command in the sandbox can change the path between them. A destination
created in that window may be overwritten by a daemon whose move overwrites;
an entry created in a directory between the emptiness check and a remove
whose daemon removes recursively goes with it; a checked directory swapped
for a link may redirect the call. All of them stay inside the sandbox: they
reach only what the sandbox's own commands can already change (as for
:mod:`mango.provider.paths`' stat-then-transfer).

A call that fails with a retryable :class:`MangoError` goes through the
sandbox's ``_lost`` hook (:class:`~mango.provider.files.RemoteFiles`), so a
vanished sandbox is :class:`SandboxNotFound`, as for reads and writes.

Stdlib and attrs only.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import ClassVar, TypeVar

import attrs

from mango.domain.errors import (
    DirectoryNotEmpty,
    MangoError,
    PathEscapeError,
    PathExists,
    PermanentError,
    ProtocolError,
)
from mango.domain.sandbox_ports import (
    DEFAULT_LIST_LIMIT,
    DirectoryListing,
    FileInfo,
    FileKind,
)
from mango.provider.execution import checkpoint
from mango.provider.fileapi import FirstEntries, check_list_limit, refuse_root
from mango.provider.files import RemoteFiles
from mango.provider.paths import (
    MAX_CONCURRENT_STATS,
    Entry,
    EntryKind,
    Location,
    check_directory,
    file_not_found,
)

__all__ = ["NativeEntry", "RemoteFileSystem"]

T = TypeVar("T")

_KINDS = {
    EntryKind.REGULAR: FileKind.FILE,
    EntryKind.DIRECTORY: FileKind.DIRECTORY,
    EntryKind.SYMLINK: FileKind.SYMLINK,
    EntryKind.OTHER: FileKind.OTHER,
}
_ENTRY_KINDS = {kind: entry for entry, kind in _KINDS.items()}


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is None:
        return None
    return value.astimezone(UTC)


@attrs.frozen
class NativeEntry:
    """One entry as a daemon reports it, seen without following it.

    ``path`` is absolute in the sandbox; ``mode`` the permission bits where
    the daemon tells them, ``mtime`` an aware time where it tells one.
    """

    path: str
    kind: EntryKind
    size: int = 0
    mode: int | None = None
    mtime: datetime | None = None

    @property
    def entry(self) -> Entry:
        """The path policy's view of it."""
        return Entry(self.kind, self.size)


class RemoteFileSystem(RemoteFiles):
    """Mixin giving a remote sandbox the file API over its daemon's calls.

    Beside :class:`~mango.provider.files.RemoteFiles`' attributes and stat
    callback, the sandbox class defines:

    * ``_entry_info(path)``: the absolute ``path``'s :class:`NativeEntry`, never
      following its last component; ``None`` if it does not exist;
    * ``_listing(path, recursive=...)``: an async context manager yielding
      the :class:`NativeEntry` s below the absolute directory ``path`` (all
      levels with ``recursive``, never descending into a link), as they
      arrive; :attr:`sorted_listing` says that a one-level listing arrives
      in name order; :attr:`listing_descends` says that it always descends
      (the kit keeps the first level itself when not ``recursive``);
    * ``_describe(entries)`` (optional): complete the kept entries of a
      listing whose daemon names them without describing them (their
      :class:`NativeEntry` s in order, ``None`` for one that vanished);
    * ``_move(source, destination)``: the absolute rename (the destination
      has been checked to be missing);
    * ``_delete(entry, recursive=...)``: remove what ``entry`` names (a
      directory's emptiness has been checked unless ``recursive``);
    * ``_create_dir(path)``: create the absolute directory ``path`` and its
      missing parents (the components have been checked).
    """

    __slots__ = ()
    sorted_listing: ClassVar[bool] = False
    """A one-level native listing arrives sorted by name (the listing stops at the limit)."""
    listing_descends: ClassVar[bool] = False
    """The native listing is always the whole tree (pre-order, each level in name order)."""

    async def _entry_info(self, path: str) -> NativeEntry | None:
        raise NotImplementedError

    def _listing(
        self, path: str, *, recursive: bool
    ) -> AbstractAsyncContextManager[AsyncIterator[NativeEntry]]:
        raise NotImplementedError

    async def _describe(self, entries: list[NativeEntry]) -> list[NativeEntry | None]:
        return list(entries)

    async def _move(self, source: str, destination: str) -> None:
        raise NotImplementedError

    async def _delete(self, entry: NativeEntry, *, recursive: bool) -> None:
        raise NotImplementedError

    async def _create_dir(self, path: str) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ checks

    async def _check_file_api(self) -> None:
        """Refuse the file API for this sandbox before any call (default: nothing to refuse).

        For a daemon whose version cannot keep the promises (say, a stat that
        follows links): raise a :class:`~mango.domain.errors.PermanentError`
        (a :class:`~mango.domain.errors.ConfigurationError` naming the version).
        """

    async def _guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        await self._check_file_api()
        try:
            return await call()
        except MangoError as exc:
            await self._fail(exc)

    def _relative(self, location: Location, path: str) -> str:
        """The caller's form of the absolute ``path`` below ``location``'s anchor."""
        if location.anchor != self._path_policy.root:
            return path
        return path[len(location.anchor) :].lstrip("/")

    def _file_info(self, location: Location, native: NativeEntry) -> FileInfo:
        shown = self._relative(location, native.path)
        mode = native.mode & 0o7777 if native.mode is not None else None
        return FileInfo(
            path=shown,
            name=shown.rsplit("/", 1)[-1],
            kind=_KINDS[native.kind],
            size=native.size,
            mode=mode,
            mtime=_utc(native.mtime),
        )

    async def _checked(self, path: str, *, write: bool) -> tuple[Location, NativeEntry | None]:
        """Locate ``path`` (the root allowed), check its parents, lstat its last component."""
        policy = self._path_policy
        location = policy.locate(path, write=write, directory=True)
        await checkpoint()
        stat = await self._stat_for(location)
        prefixes = location.prefixes()
        gate = asyncio.Semaphore(MAX_CONCURRENT_STATS)

        async def parent(prefix: str) -> Entry | None:
            async with gate:
                return await stat(prefix)

        async def target() -> NativeEntry | None:
            async with gate:
                return await self._entry_info(prefixes[-1])

        *parents, last = await asyncio.gather(
            *(parent(prefix) for prefix in prefixes[:-1]), target(), return_exceptions=True
        )
        # In order: a failure counts only once every component before it was a directory.
        for index, result in enumerate(parents):
            if isinstance(result, BaseException):
                raise result
            self._check_parent(location, index, result, path=path)
        if isinstance(last, BaseException):
            raise last
        if not isinstance(last, NativeEntry | None):  # pragma: no cover - typing only
            raise ProtocolError("a native stat answered something else")
        if not location.parts:
            self._check_parent(location, 0, last.entry if last else None, path=path)
        return location, last

    @staticmethod
    def _check_parent(location: Location, index: int, entry: object, *, path: str) -> None:
        if index == 0:
            if entry is None:
                raise PermanentError(f"the sandbox's root directory {location.anchor} is missing")
            if not isinstance(entry, Entry) or entry.kind is not EntryKind.DIRECTORY:
                raise PathEscapeError(
                    f"the sandbox's {location.anchor} was replaced by a symlink or a file"
                )
            return
        if entry is None:
            raise file_not_found(path)
        if not isinstance(entry, Entry):  # pragma: no cover - typing only
            raise ProtocolError("a stat answered something else")
        check_directory(entry, path=path, name=location.parts[index - 1])

    # ------------------------------------------------------------ the port

    async def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names, without following a last-component link."""

        async def call() -> FileInfo:
            location, native = await self._checked(path, write=False)
            if native is None:
                raise file_not_found(path)
            return self._file_info(location, attrs.evolve(native, path=location.path))

        return await self._guarded(call)

    async def exists(self, path: str) -> bool:
        """True if ``path`` names an entry (a dangling link exists); escapes still raise."""
        try:
            await self.stat(path)
        except FileNotFoundError:
            return False
        return True

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        """The entries below the directory ``path``, sorted by path, at most ``limit``."""
        bound = check_list_limit(limit)

        async def call() -> DirectoryListing:
            location, native = await self._checked(path, write=False)
            if native is None:
                raise file_not_found(path)
            if native.kind is EntryKind.SYMLINK:
                raise PathEscapeError(
                    f"path {path!r} is a symlink; symlinks in the workspace are never followed"
                )
            if native.kind is not EntryKind.DIRECTORY:
                raise PermanentError(f"path {path!r} is not a directory")
            return await self._collect(location, recursive=recursive, limit=bound)

        return await self._guarded(call)

    async def _collect(
        self, location: Location, *, recursive: bool, limit: int
    ) -> DirectoryListing:
        below = location.path.rstrip("/") + "/"
        controls = tuple(control.rstrip("/") + "/" for control in self._path_policy.control_dirs)
        early = self.sorted_listing and not recursive
        first = FirstEntries(limit)
        offered = 0
        async with self._listing(location.path, recursive=recursive) as entries:
            async for native in entries:
                name = native.path[len(below) :]
                if not native.path.startswith(below) or not name or "//" in native.path:
                    raise ProtocolError(
                        f"the listing of {location.path} names {native.path!r}, "
                        "which is not below it"
                    )
                if ".." in name.split("/"):
                    raise ProtocolError(f"the listing of {location.path} names {native.path!r}")
                if not recursive and "/" in name:
                    if self.listing_descends:
                        continue
                    raise ProtocolError(f"the listing of {location.path} names {native.path!r}")
                if any((native.path + "/").startswith(control) for control in controls):
                    continue
                first.offer(self._file_info(location, native))
                offered += 1
                if early and offered > limit:
                    break  # in name order: what follows would sort after the kept ones
        listing = first.listing()
        if type(self)._describe is RemoteFileSystem._describe:
            return listing
        natives = [self._native(info) for info in listing.entries]
        described = await self._describe(natives)
        infos = tuple(self._file_info(location, native) for native in described if native)
        return DirectoryListing(infos, truncated=listing.truncated)

    def _native(self, info: FileInfo) -> NativeEntry:
        """A kept entry back as the daemon's (its absolute path), for ``_describe``."""
        shown = info.path
        absolute = shown if shown.startswith("/") else posixpath.join(self._path_policy.root, shown)
        return NativeEntry(absolute, _ENTRY_KINDS[info.kind], info.size, info.mode, info.mtime)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a link (not its target) or a directory (its tree with ``recursive``)."""

        async def call() -> None:
            location, native = await self._checked(path, write=True)
            refuse_root(location, path, "removed")
            if native is None:
                raise file_not_found(path)
            if native.kind is EntryKind.DIRECTORY and not recursive:
                async with self._listing(location.path, recursive=False) as entries:
                    async for _ in entries:
                        raise DirectoryNotEmpty(f"directory {path!r} is not empty")
            await self._delete(attrs.evolve(native, path=location.path), recursive=recursive)

        await self._guarded(call)

    async def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination``, which must not exist (its parent must)."""

        async def call() -> None:
            where, native = await self._checked(source, write=True)
            refuse_root(where, source, "renamed")
            to, existing = await self._checked(destination, write=True)
            refuse_root(to, destination, "renamed onto")
            if native is None:
                raise file_not_found(source)
            if existing is not None:
                raise PathExists(f"cannot rename {source!r}: {destination!r} exists")
            if to.anchor == where.anchor and to.parts[: len(where.parts)] == where.parts:
                raise PermanentError(f"cannot move {source!r} into itself ({destination!r})")
            await self._move(where.path, to.path)

        await self._guarded(call)

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Create the directory ``path`` (``mkdir -p`` with ``parents``)."""

        async def call() -> None:
            policy = self._path_policy
            location = policy.locate(path, write=True, directory=True)
            await checkpoint()
            stat = await self._stat_for(location)
            prefixes = location.prefixes()
            self._check_parent(location, 0, await stat(prefixes[0]), path=path)
            last = len(location.parts)
            if not last:
                if not parents:
                    raise PathExists(f"directory {path!r} exists (the workspace root)")
                return
            for index in range(1, last + 1):
                entry = await stat(prefixes[index])
                if entry is None:
                    if not parents and index < last:
                        raise file_not_found(path)
                    break
                if index < last or entry.kind is EntryKind.SYMLINK:
                    # A link is never made through, nor taken for the directory it names.
                    check_directory(entry, path=path, name=location.parts[index - 1])
                    continue
                if entry.kind is EntryKind.DIRECTORY and parents:
                    return
                raise PathExists(f"cannot make directory {path!r}: it exists")
            await self._create_dir(location.path)

        await self._guarded(call)
