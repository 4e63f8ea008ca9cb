"""Workspace file access that never follows a symlink.

Paths are validated by :func:`mango.domain.paths.split_workspace_path` and then
walked one component at a time with ``openat`` from a descriptor of the
workspace root (``O_NOFOLLOW`` on every step). A symlink anywhere in the path,
including one a command planted (``ln -s /etc leak``), is refused with
:class:`PathEscapeError` instead of being resolved, and there is no window in
which a swapped component could redirect the access.

Hard links are not detected: a command running as the host user can already
reach any file that user can, which is why the local provider is not an
isolation boundary.

These functions block; the sandbox calls them through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from mango.domain.errors import (
    PathEscapeError,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.domain.paths import split_workspace_path

__all__ = [
    "ensure_workspace_dir",
    "read_workspace_file",
    "write_workspace_file",
]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o644
_DIRECTORY_MODE = 0o755
_READ_CHUNK = 1024 * 1024


def _open_root(root: str) -> int:
    try:
        return os.open(root, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        raise SandboxNotFound(f"local sandbox workspace {root} no longer exists") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathEscapeError(
                f"local sandbox workspace {root} was replaced by a symlink or a file"
            ) from None
        raise _translate(exc, root) from exc


def _translate(exc: OSError, what: str) -> Exception:
    """Map an unexpected OS error to the mango error tree."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermanentError(f"permission denied on workspace path {what!r}")
    return ProviderUnavailable(f"local filesystem error on workspace path {what!r}: {exc}")


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_existing_directory(name: str, dir_fd: int, *, path: str) -> int:
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such directory in the workspace", path) from None
    except OSError as exc:
        # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux and
        # ELOOP elsewhere; lstat tells a link from a plain file.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_symlink(name, dir_fd)):
            raise PathEscapeError(
                f"path {path!r} goes through the symlink {name!r}; "
                "symlinks in the workspace are never followed"
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise PermanentError(f"path {path!r}: component {name!r} is not a directory") from None
        raise _translate(exc, path) from exc


def _open_directory(name: str, dir_fd: int, *, path: str, create: bool) -> int:
    """Open the directory ``name`` below ``dir_fd`` (creating it if asked), never via a symlink."""
    try:
        return _open_existing_directory(name, dir_fd, path=path)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, _DIRECTORY_MODE, dir_fd=dir_fd)
    except FileExistsError:
        pass  # a concurrent writer made it; the open below still refuses a symlink
    except OSError as exc:
        raise _translate(exc, path) from exc
    return _open_existing_directory(name, dir_fd, path=path)


def _walk(root_fd: int, parts: tuple[str, ...], *, path: str, create: bool) -> int:
    """Return a new descriptor of the directory ``parts`` below ``root_fd``."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = _open_directory(part, fd, path=path, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_workspace_dir(root: str, path: str) -> str:
    """Create-if-absent the workspace directory ``path``; return its host path.

    Raises :class:`PathEscapeError` if any component is a symlink and
    :class:`SandboxNotFound` if the workspace is gone.
    """
    parts = split_workspace_path(path, allow_root=True)
    root_fd = _open_root(root)
    try:
        os.close(_walk(root_fd, parts, path=path, create=True))
    finally:
        os.close(root_fd)
    return str(Path(root).joinpath(*parts))


def read_workspace_file(root: str, path: str) -> bytes:
    """Return the bytes of the regular file ``path`` in the workspace.

    Raises :class:`FileNotFoundError` if it is missing, :class:`PermanentError`
    if it is a directory or another non-regular file, :class:`PathEscapeError`
    for escapes and symlinks, and :class:`SandboxNotFound` if the workspace is gone.
    """
    parts = split_workspace_path(path)
    root_fd = _open_root(root)
    try:
        dir_fd = _walk(root_fd, parts[:-1], path=path, create=False)
    finally:
        os.close(root_fd)
    try:
        # O_NONBLOCK: opening a FIFO must not hang waiting for a writer.
        fd = os.open(
            parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file in the workspace", path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathEscapeError(
                f"path {path!r} is a symlink; symlinks in the workspace are never followed"
            ) from None
        raise _translate(exc, path) from exc
    finally:
        os.close(dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise PermanentError(f"path {path!r} is a directory, not a regular file")
        if not stat.S_ISREG(mode):
            raise PermanentError(f"path {path!r} is not a regular file")
        chunks: list[bytes] = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _translate(exc, path) from exc
    finally:
        os.close(fd)


def write_workspace_file(root: str, path: str, data: bytes) -> None:
    """Create or truncate the regular file ``path`` with ``data``, creating parents.

    Files are created with mode 0o644 and directories with 0o755 (less the
    umask). Raises :class:`PathEscapeError` for escapes and symlinks,
    :class:`PermanentError` if the target is a directory or not a regular file,
    and :class:`SandboxNotFound` if the workspace is gone.
    """
    parts = split_workspace_path(path)
    root_fd = _open_root(root)
    try:
        dir_fd = _walk(root_fd, parts[:-1], path=path, create=True)
    finally:
        os.close(root_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(parts[-1], flags, _FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathEscapeError(
                f"path {path!r} is a symlink; symlinks in the workspace are never followed"
            ) from None
        if exc.errno == errno.EISDIR:
            raise PermanentError(f"path {path!r} is a directory, not a regular file") from None
        if exc.errno == errno.ENXIO:
            raise PermanentError(f"path {path!r} is not a regular file") from None
        raise _translate(exc, path) from exc
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PermanentError(f"path {path!r} is not a regular file")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        raise _translate(exc, path) from exc
    finally:
        os.close(fd)
