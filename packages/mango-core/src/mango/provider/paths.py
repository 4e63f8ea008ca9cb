"""Path policy for file tools, over any provider's stat call.

Every provider answers ``read_file`` and ``write_file`` by the same rules; this
module holds them once so that a path one backend accepts no other refuses.

* **Lexical rules** (:mod:`mango.domain.paths`): no ``..`` component at all
  (even one that would stay inside), no NUL, control character or backslash,
  valid UTF-8 (a surrogate-escaped string from :func:`os.fsdecode` is refused
  with :class:`InvalidPathError`), bounded lengths.
* **Where a path may land** (:meth:`PathPolicy.locate`): a relative path is
  below the workspace root. An absolute path, if the policy accepts absolute
  paths at all, must be inside the workspace root or strictly below one of the
  provider's :class:`ExtraRoot`\\ s. Writes anywhere inside a read-only extra
  root are refused, and the adapter's control directories are never reachable,
  whichever root the path came through.
* **No symlink anywhere** (:meth:`PathPolicy.resolve_read`,
  :meth:`PathPolicy.resolve_write`, :meth:`PathPolicy.resolve_directory`):
  the anchor (the workspace root or extra root the path lands under) and every
  component below it are classified through the provider's stat callback,
  which must *not* follow the last component of the path it is given. A
  symlink raises :class:`PathEscapeError`, a parent that is not a directory or
  a target that is not a regular file raises :class:`PermanentError`. The
  anchors' own ancestors are laid out by the adapter and are not checked.

A remote provider plugs in its file API by passing a stat function; the local
provider keeps its race-free ``openat``/``O_NOFOLLOW`` walk and shares the
rest: :meth:`PathPolicy.locate`, :class:`Entry` and the checks
:func:`check_directory` and :func:`check_regular`, which raise the errors with
the same messages everywhere.

A stat-then-transfer provider has a window in which a command could swap a
checked directory for a link; that can redirect the access only to another
place the same sandbox's commands can already write, never out of the sandbox.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import posixpath
import stat as stat_module
from collections.abc import Awaitable, Callable, Iterable

import attrs

from mango.domain.errors import (
    ConfigurationError,
    InvalidPathError,
    PathEscapeError,
    PermanentError,
)
from mango.domain.paths import split_absolute_path, split_workspace_path

__all__ = [
    "MAX_CONCURRENT_STATS",
    "Entry",
    "EntryKind",
    "ExtraRoot",
    "Location",
    "PathPolicy",
    "ResolvedPath",
    "StatCallback",
    "check_directory",
    "check_regular",
    "file_not_found",
]

MAX_CONCURRENT_STATS = 8
"""How many stat calls one resolution keeps in flight (they run concurrently, in order)."""


class EntryKind(enum.Enum):
    """What a path names, as a stat that does not follow the last component sees it."""

    DIRECTORY = "directory"
    REGULAR = "regular"
    SYMLINK = "symlink"
    OTHER = "other"
    """A FIFO, socket, device, or anything else that is neither file nor directory."""


@attrs.frozen
class Entry:
    """The result of a provider's stat: the kind of the path and its size in bytes."""

    kind: EntryKind
    size: int = 0

    @classmethod
    def from_mode(cls, mode: int, size: int = 0) -> Entry:
        """Classify a POSIX ``st_mode`` (from ``lstat``/``fstat``)."""
        if stat_module.S_ISLNK(mode):
            return cls(EntryKind.SYMLINK, size)
        if stat_module.S_ISDIR(mode):
            return cls(EntryKind.DIRECTORY, size)
        if stat_module.S_ISREG(mode):
            return cls(EntryKind.REGULAR, size)
        return cls(EntryKind.OTHER, size)


StatCallback = Callable[[str], Awaitable[Entry | None]]
"""``async def stat(absolute_path) -> Entry | None``: never follows the path's last component.

Returns ``None`` when the path does not exist. It may raise for a path below a
non-directory (as Docker's archive API does); the policy looks at such a
failure only once every earlier component has been found to be a directory.
"""


def check_directory(entry: Entry, *, path: str, name: str) -> None:
    """Refuse a component ``name`` of ``path`` that is not a plain directory.

    A symlink raises :class:`PathEscapeError`; anything else that is not a
    directory raises :class:`PermanentError`.
    """
    if entry.kind is EntryKind.SYMLINK:
        raise PathEscapeError(
            f"path {path!r} goes through the symlink {name!r}; "
            "symlinks in the workspace are never followed"
        )
    if entry.kind is not EntryKind.DIRECTORY:
        raise PermanentError(f"path {path!r}: component {name!r} is not a directory")


def check_regular(entry: Entry, *, path: str) -> None:
    """Refuse a target that is not a regular file (a symlink is a :class:`PathEscapeError`)."""
    if entry.kind is EntryKind.SYMLINK:
        raise PathEscapeError(
            f"path {path!r} is a symlink; symlinks in the workspace are never followed"
        )
    if entry.kind is EntryKind.DIRECTORY:
        raise PermanentError(f"path {path!r} is a directory, not a regular file")
    if entry.kind is not EntryKind.REGULAR:
        raise PermanentError(f"path {path!r} is not a regular file")


def file_not_found(path: str) -> FileNotFoundError:
    """The error for a missing file or parent (what ``read_file`` raises)."""
    return FileNotFoundError(errno.ENOENT, "no such file in the workspace", path)


def _root(value: object) -> str:
    """Validate an adapter-given root: absolute, normal, NUL-free, UTF-8."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigurationError(f"a path policy root must be an absolute path, got {value!r}")
    if "\x00" in value or ".." in value.split("/"):
        raise ConfigurationError(f"a path policy root may not contain NUL or '..': {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(f"a path policy root must be valid UTF-8: {value!r}") from None
    return posixpath.normpath(value).replace("//", "/")


def _roots(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(_root(value) for value in values)


def _within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both normal and absolute)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _join(anchor: str, parts: Iterable[str]) -> str:
    return posixpath.join(anchor, *parts)


@attrs.frozen
class ExtraRoot:
    """An absolute root, besides the workspace, that tools may reach with absolute paths.

    Paths strictly below ``path`` are accepted (the root itself is not). A
    read-only root (the default) refuses every write inside it, including a
    write that reaches it through a relative path when it lies in the workspace.
    """

    path: str = attrs.field(converter=_root)
    writable: bool = attrs.field(default=False, kw_only=True)


def _extra_roots(values: Iterable[ExtraRoot | str]) -> tuple[ExtraRoot, ...]:
    return tuple(value if isinstance(value, ExtraRoot) else ExtraRoot(value) for value in values)


@attrs.frozen
class Location:
    """Where a checked path lands: below ``anchor`` (a workspace or extra root), at ``parts``."""

    anchor: str
    parts: tuple[str, ...]

    @property
    def path(self) -> str:
        """The absolute path in the sandbox."""
        return _join(self.anchor, self.parts)

    def prefixes(self) -> tuple[str, ...]:
        """The anchor, then every component prefix as an absolute path, ending with :attr:`path`."""
        return tuple(_join(self.anchor, self.parts[:index]) for index in range(len(self.parts) + 1))


@attrs.frozen
class ResolvedPath:
    """A path the policy accepted after classifying every component.

    ``entry`` is the target's stat (``None`` when a write will create it);
    ``missing_dirs`` are the absolute directories a write must create first,
    outermost first.
    """

    location: Location
    entry: Entry | None
    missing_dirs: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """The absolute path in the sandbox."""
        return self.location.path

    @property
    def anchor(self) -> str:
        """The workspace or extra root the path lies below (checked to be a real directory)."""
        return self.location.anchor


@attrs.frozen
class PathPolicy:
    """Which paths tools may read and write in one sandbox, and how to check them.

    ``root`` is the workspace root as the sandbox sees it (``/workspace`` in
    containers, the host path for the local provider). ``extra_roots`` and
    ``control_dirs`` are absolute. Absolute paths are accepted only with
    ``accept_absolute``: the :class:`~mango.domain.ports.Sandbox` port is
    workspace-relative today, so the built-in providers refuse them.
    """

    root: str = attrs.field(converter=_root)
    extra_roots: tuple[ExtraRoot, ...] = attrs.field(
        default=(), converter=_extra_roots, kw_only=True
    )
    control_dirs: tuple[str, ...] = attrs.field(default=(), converter=_roots, kw_only=True)
    accept_absolute: bool = attrs.field(default=False, kw_only=True)
    absolute_roots_only: bool = attrs.field(default=False, kw_only=True)
    """With ``accept_absolute``: absolute paths only below the extra roots; a workspace
    path must still be given relative (as the Sandbox port says)."""

    def __attrs_post_init__(self) -> None:
        for control in self.control_dirs:
            for root in (self.root, *(extra.path for extra in self.extra_roots)):
                if _within(root, control):
                    raise ConfigurationError(
                        f"the path policy root {root} lies inside the control directory {control}"
                    )

    def locate(self, path: str, *, write: bool = False, directory: bool = False) -> Location:
        """Apply the lexical rules and the root decision to ``path``; no I/O.

        ``directory`` accepts a path naming a root (for a working directory).
        Raises :class:`InvalidPathError` for malformed paths (including
        non-UTF-8 strings) and :class:`PathEscapeError` for ``..``, absolute
        paths outside the allowed roots, control directories, and (with
        ``write``) paths inside a read-only extra root.
        """
        if isinstance(path, str) and path.startswith("/") and self.accept_absolute:
            location = self._locate_absolute(path, directory=directory)
        else:
            location = Location(self.root, split_workspace_path(path, allow_root=directory))
        target = location.path
        for control in self.control_dirs:
            if _within(target, control):
                raise PathEscapeError(
                    f"path {path!r} is inside a directory reserved for the sandbox's adapter"
                )
        if write:
            for extra in self.extra_roots:
                if not extra.writable and _within(target, extra.path):
                    raise PathEscapeError(f"path {path!r} is inside the read-only {extra.path}")
        return location

    def _locate_absolute(self, path: str, *, directory: bool) -> Location:
        parts = split_absolute_path(path)
        target = _join("/", parts)
        if _within(target, self.root) and self.absolute_roots_only:
            raise PathEscapeError(
                f"path {path!r} is absolute; give a path relative to the workspace"
            )
        if _within(target, self.root):
            anchor = self.root
        else:
            # The outermost extra root strictly above the target: the walk then
            # checks every component below it, nested roots included.
            candidates = [
                extra.path
                for extra in self.extra_roots
                if _within(target, extra.path) and target != extra.path
            ]
            if not candidates:
                raise PathEscapeError(f"path {path!r} is outside the workspace and the extra roots")
            anchor = min(candidates, key=len)
        below = parts[len([part for part in anchor.split("/") if part]) :]
        if not below and not directory:
            raise InvalidPathError(f"path {path!r} names a root directory, not a file")
        if not directory and path.rsplit("/", 1)[-1] in ("", "."):
            raise InvalidPathError(
                f"path {path!r} ends in '/', so it names a directory, not a file"
            )
        return Location(anchor, below)

    async def resolve_read(self, path: str, stat: StatCallback) -> ResolvedPath:
        """Locate ``path`` and check that it is a regular file reached through directories only.

        Raises :class:`FileNotFoundError` if it or a parent is missing, and the
        errors of :meth:`locate`, :func:`check_directory` and :func:`check_regular`.
        """
        return await self._resolve(self.locate(path), stat, path=path, write=False, file=True)

    async def resolve_write(self, path: str, stat: StatCallback) -> ResolvedPath:
        """Locate ``path`` for a write: parents are directories or missing; the target is a
        regular file or missing. ``missing_dirs`` lists the parents to create."""
        location = self.locate(path, write=True)
        return await self._resolve(location, stat, path=path, write=True, file=True)

    async def resolve_directory(
        self, path: str, stat: StatCallback, *, create: bool = False
    ) -> ResolvedPath:
        """Locate the directory ``path`` (a root is allowed); with ``create``, list what is missing.

        Without ``create`` a missing component raises :class:`FileNotFoundError`.
        """
        location = self.locate(path, write=create, directory=True)
        return await self._resolve(location, stat, path=path, write=create, file=False)

    async def _resolve(
        self, location: Location, stat: StatCallback, *, path: str, write: bool, file: bool
    ) -> ResolvedPath:
        prefixes = location.prefixes()
        results = await _stat_all(prefixes, stat)
        anchor = results[0]
        if isinstance(anchor, BaseException):
            raise anchor
        if anchor is None:
            raise PermanentError(f"the sandbox's root directory {location.anchor} is missing")
        if anchor.kind is not EntryKind.DIRECTORY:
            raise PathEscapeError(
                f"the sandbox's {location.anchor} was replaced by a symlink or a file"
            )
        # In order: a failure counts only once every component before it has
        # been seen to be a directory (below a file or a link, a stat may fail).
        entry: Entry | None = anchor
        for index, name in enumerate(location.parts):
            result = results[index + 1]
            if isinstance(result, BaseException):
                raise result
            if result is None:
                if not write:
                    raise file_not_found(path)
                end = len(prefixes) - 1 if file else len(prefixes)
                return ResolvedPath(location, None, prefixes[index + 1 : end])
            if file and index == len(location.parts) - 1:
                check_regular(result, path=path)
            else:
                check_directory(result, path=path, name=name)
            entry = result
        return ResolvedPath(location, entry)


async def _stat_all(
    paths: tuple[str, ...], stat: StatCallback
) -> list[Entry | BaseException | None]:
    """Stat every path concurrently (at most :data:`MAX_CONCURRENT_STATS` at once)."""
    gate = asyncio.Semaphore(MAX_CONCURRENT_STATS)

    async def one(path: str) -> Entry | None:
        async with gate:
            return await stat(path)

    return list(await asyncio.gather(*(one(path) for path in paths), return_exceptions=True))
