"""The file API (capability ``file-api``) over the workspace directory, race-free.

Every operation walks to the *parent* of its target with the same
``openat``/``O_NOFOLLOW`` walk the reads and writes use
(:mod:`mango.local.files`), then acts on the last component relative to that
descriptor (``lstat``, ``unlinkat``, ``mkdirat``, ``renameat2``,
``rmtree(dir_fd=...)``). A symlink anywhere above the target, including one
swapped in while the call runs, is refused with :class:`PathEscapeError`:
a component swapped after it was opened cannot redirect the descriptor the
walk holds. The last component is never followed (``lstat`` semantics).

Listings read the directory lazily with :func:`os.scandir` and keep at most
``limit`` entries (a heap of the smallest paths seen), so a directory with a
million entries costs O(limit) memory; a recursive listing descends depth
first with one open descriptor per level, never into a link, and skips a
sub-directory that cannot hold an entry small enough to be kept.

Renames are atomic and never replace a destination (``renameat2`` with
``RENAME_NOREPLACE``, through the C library); where the kernel or the
filesystem lacks it, the destination is checked first and a destination made
in between by a command can be replaced (the one non-atomic case).

These functions block; the sandbox calls them through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat as stat_module
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from mango.local.files import open_existing_directory, walk_directories
from mango.provider import (
    DirectoryListing,
    DirectoryNotEmpty,
    FileInfo,
    FileKind,
    FirstEntries,
    Location,
    PathEscapeError,
    PathExists,
    PathPolicy,
    PermanentError,
    ProviderUnavailable,
    check_list_limit,
    file_not_found,
)
from mango.provider.fileapi import refuse_root

if TYPE_CHECKING:
    from os import _ScandirIterator

__all__ = [
    "file_info",
    "list_workspace_dir",
    "make_workspace_dir",
    "remove_workspace_path",
    "rename_workspace_path",
    "stat_workspace_path",
]

_RENAME_NOREPLACE = 1
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_MODE = 0o755


def file_info(path: str, result: os.stat_result) -> FileInfo:
    """The :class:`FileInfo` of the workspace path ``path`` from its ``lstat``."""
    mode = result.st_mode
    if stat_module.S_ISLNK(mode):
        kind = FileKind.SYMLINK
    elif stat_module.S_ISDIR(mode):
        kind = FileKind.DIRECTORY
    elif stat_module.S_ISREG(mode):
        kind = FileKind.FILE
    else:
        kind = FileKind.OTHER
    return FileInfo(
        path=path,
        name=path.rsplit("/", 1)[-1],
        kind=kind,
        size=result.st_size,
        mode=stat_module.S_IMODE(mode),
        mtime=datetime.fromtimestamp(result.st_mtime, UTC),
    )


def _translate(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermanentError(f"permission denied on workspace path {path!r}")
    if exc.errno in (errno.ENOTDIR, errno.EINVAL, errno.EBUSY, errno.EXDEV, errno.EISDIR):
        return PermanentError(f"workspace path {path!r}: {os.strerror(exc.errno or 0)}")
    return ProviderUnavailable(f"local filesystem error on workspace path {path!r}: {exc}")


def _locate(policy: PathPolicy, path: str, *, write: bool = False) -> Location:
    return policy.locate(path, write=write, directory=True)


@contextlib.contextmanager
def _parent(location: Location, path: str, *, create: bool = False) -> Iterator[int]:
    """A descriptor of the target's parent, reached by the ``O_NOFOLLOW`` walk."""
    fd = walk_directories(location, location.parts[:-1], path=path, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int, path: str) -> os.stat_result:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        raise file_not_found(path) from None
    except OSError as exc:
        raise _translate(exc, path) from exc


def _relative(location: Location) -> str:
    return "/".join(location.parts)


def stat_workspace_path(policy: PathPolicy, path: str) -> FileInfo:
    """The entry ``path`` names (the root allowed), never following its last component."""
    location = _locate(policy, path)
    if not location.parts:
        fd = walk_directories(location, (), path=path, create=False)
        try:
            return file_info("", os.fstat(fd))
        finally:
            os.close(fd)
    with _parent(location, path) as fd:
        return file_info(_relative(location), _lstat(location.parts[-1], fd, path))


def _open_listed(location: Location, path: str) -> int:
    if not location.parts:
        return walk_directories(location, (), path=path, create=False)
    with _parent(location, path) as fd:
        return open_existing_directory(location.parts[-1], fd, path=path)


def _open_child(name: str, dir_fd: int) -> int | None:
    """The sub-directory ``name`` to descend into, or None if it is no longer a directory."""
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # swapped for a link or a file, or removed, since it was listed


def _scan(fd: int, prefix: str, kept: FirstEntries, *, recursive: bool, path: str) -> None:
    """Offer every entry below the directory ``fd`` (depth first, one descriptor per level)."""
    stack: list[tuple[int, str, _ScandirIterator[str]]] = []
    try:
        stack.append((fd, prefix, os.scandir(fd)))
        while stack:
            dir_fd, base, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                entries.close()
                if dir_fd != fd:
                    os.close(dir_fd)
                continue
            child = f"{base}/{entry.name}" if base else entry.name
            try:
                info = file_info(child, entry.stat(follow_symlinks=False))
            except FileNotFoundError:
                continue  # removed since the directory was read
            kept.offer(info)
            if recursive and info.kind is FileKind.DIRECTORY and kept.could_keep(child + "/"):
                child_fd = _open_child(entry.name, dir_fd)
                if child_fd is not None:
                    try:
                        stack.append((child_fd, child, os.scandir(child_fd)))
                    except BaseException:
                        os.close(child_fd)
                        raise
            elif recursive and info.kind is FileKind.DIRECTORY:
                kept.mark_truncated()  # below it are entries too large to be kept
    except OSError as exc:
        raise _translate(exc, path) from exc
    finally:
        for dir_fd, _base, entries in stack:
            entries.close()
            if dir_fd != fd:
                os.close(dir_fd)


def list_workspace_dir(
    policy: PathPolicy, path: str, *, recursive: bool, limit: int
) -> DirectoryListing:
    """The first ``limit`` entries below the directory ``path`` in path order (see the module)."""
    kept = FirstEntries(check_list_limit(limit))
    location = _locate(policy, path)
    fd = _open_listed(location, path)
    try:
        _scan(fd, _relative(location), kept, recursive=recursive, path=path)
    finally:
        os.close(fd)
    return kept.listing()


def remove_workspace_path(policy: PathPolicy, path: str, *, recursive: bool) -> None:
    """Remove a file, a link (itself) or a directory (empty, or with ``recursive`` its tree)."""
    location = _locate(policy, path, write=True)
    refuse_root(location, path, "removed")
    name = location.parts[-1]
    with _parent(location, path) as fd:
        if not stat_module.S_ISDIR(_lstat(name, fd, path).st_mode):
            _unlink(name, fd, path)
        elif recursive:
            _remove_tree(name, fd, path)
        else:
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise DirectoryNotEmpty(
                        f"directory {path!r} is not empty; remove it recursively"
                    ) from None
                if exc.errno == errno.ENOTDIR:
                    _unlink(name, fd, path)  # swapped for a file or a link meanwhile
                    return
                raise _map_missing(exc, path) from exc


def _map_missing(exc: OSError, path: str) -> Exception:
    return file_not_found(path) if exc.errno == errno.ENOENT else _translate(exc, path)


def _unlink(name: str, dir_fd: int, path: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        raise _map_missing(exc, path) from exc


def _remove_tree(name: str, dir_fd: int, path: str) -> None:
    # shutil's fd-based rmtree opens every level with O_NOFOLLOW and unlinks
    # links below it instead of following them; it refuses a top that became a link.
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux and macOS have it
        raise PermanentError("this platform cannot remove a directory tree without races")
    try:
        shutil.rmtree(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno is None and "symbolic link" in str(exc):
            raise PathEscapeError(f"path {path!r} was swapped for a symlink") from None
        raise _map_missing(exc, path) from exc


def _libc_renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return cast(Callable[..., int], function)


_RENAMEAT2 = _libc_renameat2()


def _rename_noreplace(source: str, source_fd: int, target: str, target_fd: int) -> bool:
    """``renameat2(..., RENAME_NOREPLACE)``; False where the kernel or filesystem lacks it."""
    if _RENAMEAT2 is None:
        return False
    status = _RENAMEAT2(
        source_fd, os.fsencode(source), target_fd, os.fsencode(target), _RENAME_NOREPLACE
    )
    if status == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code))


def rename_workspace_path(policy: PathPolicy, source: str, destination: str) -> None:
    """Move ``source`` to ``destination`` (which must not exist) without following links."""
    from_location = _locate(policy, source, write=True)
    to_location = _locate(policy, destination, write=True)
    refuse_root(from_location, source, "renamed")
    refuse_root(to_location, destination, "replaced")
    source_name, target_name = from_location.parts[-1], to_location.parts[-1]
    with (
        _parent(from_location, source) as source_fd,
        _parent(to_location, destination) as target_fd,
    ):
        _lstat(source_name, source_fd, source)
        try:
            if not _rename_noreplace(source_name, source_fd, target_name, target_fd):
                _check_absent(target_name, target_fd, destination)
                os.rename(source_name, target_name, src_dir_fd=source_fd, dst_dir_fd=target_fd)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise PathExists(f"destination {destination!r} already exists") from None
            raise _map_missing(exc, source) from exc


def _check_absent(name: str, dir_fd: int, path: str) -> None:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    raise PathExists(f"destination {path!r} already exists")


def make_workspace_dir(policy: PathPolicy, path: str, *, parents: bool) -> None:
    """Create the directory ``path``; with ``parents`` as ``mkdir -p`` (see the port)."""
    location = _locate(policy, path, write=True)
    if not location.parts:
        if not parents:
            raise PathExists("the workspace root exists already")
        return
    name = location.parts[-1]
    with _parent(location, path, create=parents) as fd:
        try:
            os.mkdir(name, _DIRECTORY_MODE, dir_fd=fd)
        except FileExistsError:
            existing = _lstat(name, fd, path).st_mode
        except OSError as exc:
            raise _translate(exc, path) from exc
        else:
            return
    if stat_module.S_ISLNK(existing):
        raise PathEscapeError(
            f"path {path!r} is a symlink; symlinks in the workspace are never followed"
        )
    if not (parents and stat_module.S_ISDIR(existing)):
        raise PathExists(f"path {path!r} already exists")
