"""Workspace file access that never follows a symlink.

The rules (lexical checks, which roots a path may land under, error messages)
are the provider kit's :class:`~mango.provider.paths.PathPolicy`, shared with
every other provider. Only the walk is local: instead of stat-then-open, the
located path is opened one component at a time with ``openat`` from a
descriptor of its root (``O_NOFOLLOW`` on every step). A symlink anywhere in
the path, including one a command planted (``ln -s /etc leak``), is refused
with :class:`PathEscapeError` instead of being resolved, and there is no window
in which a swapped component could redirect the access.

Hard links are not detected: a command running as the host user can already
reach any file that user can, which is why the local provider is not an
isolation boundary.

Reads are bounded at the source (:mod:`mango.provider.reads`): the size is
checked with ``fstat`` on the opened descriptor before a byte is read, and the
read stops one byte past the bound, so a sparse or growing file never costs
more memory than the bound.

These functions block; the sandbox calls them through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading

from mango.provider import (
    Entry,
    EntryKind,
    Location,
    PathEscapeError,
    PathPolicy,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
    check_directory,
    check_regular,
    file_not_found,
)
from mango.provider.reads import BoundedBuffer, check_size

__all__ = [
    "READ_CHUNK_BYTES",
    "StagedFile",
    "ensure_workspace_dir",
    "open_existing_directory",
    "open_workspace_dir",
    "open_workspace_file",
    "open_workspace_root",
    "read_chunk",
    "read_workspace_file",
    "stage_workspace_file",
    "walk_directories",
    "write_workspace_file",
]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o644
_DIRECTORY_MODE = 0o755
READ_CHUNK_BYTES = 1024 * 1024
"""Chunk size of reads and streamed downloads (one thread hop each)."""


def _policy(root: str | PathPolicy) -> PathPolicy:
    return root if isinstance(root, PathPolicy) else PathPolicy(root)


def _translate(exc: OSError, what: str) -> Exception:
    """Map an unexpected OS error to the mango error tree."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermanentError(f"permission denied on workspace path {what!r}")
    return ProviderUnavailable(f"local filesystem error on workspace path {what!r}: {exc}")


def _lstat(name: str, dir_fd: int | None = None) -> Entry | None:
    try:
        return Entry.from_mode(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return None


def _open_anchor(anchor: str) -> int:
    try:
        return os.open(anchor, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        raise SandboxNotFound(f"local sandbox workspace {anchor} no longer exists") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathEscapeError(
                f"the sandbox's {anchor} was replaced by a symlink or a file"
            ) from None
        raise _translate(exc, anchor) from exc


def open_existing_directory(name: str, dir_fd: int, *, path: str) -> int:
    """Open the existing directory ``name`` below ``dir_fd`` with ``O_NOFOLLOW``.

    A symlink is :class:`PathEscapeError`, another non-directory
    :class:`PermanentError`, a missing entry :class:`FileNotFoundError`.
    """
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise file_not_found(path) from None
    except OSError as exc:
        # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux and
        # ELOOP elsewhere; lstat tells a link from a plain file.
        if exc.errno == errno.ELOOP:
            check_directory(Entry(EntryKind.SYMLINK), path=path, name=name)
        if exc.errno == errno.ENOTDIR and (entry := _lstat(name, dir_fd)) is not None:
            check_directory(entry, path=path, name=name)
            # A directory now, not one a moment ago: swapped while we opened it,
            # which is what a planted symlink race looks like.
            raise PathEscapeError(
                f"path {path!r}: {name!r} was swapped for another entry while it was opened"
            ) from None
        raise _translate(exc, path) from exc


def _open_directory(name: str, dir_fd: int, *, path: str, create: bool) -> int:
    """Open the directory ``name`` below ``dir_fd`` (creating it if asked), never via a symlink."""
    try:
        return open_existing_directory(name, dir_fd, path=path)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, _DIRECTORY_MODE, dir_fd=dir_fd)
    except FileExistsError:
        pass  # a concurrent writer made it; the open below still refuses a symlink
    except OSError as exc:
        raise _translate(exc, path) from exc
    return open_existing_directory(name, dir_fd, path=path)


def walk_directories(location: Location, parts: tuple[str, ...], *, path: str, create: bool) -> int:
    """Return a new descriptor of the directory ``parts`` below the location's anchor.

    Each component is opened with ``O_NOFOLLOW`` from its parent's descriptor
    (created first with ``create``): a symlink is :class:`PathEscapeError`, a
    non-directory :class:`PermanentError`, a missing one :class:`FileNotFoundError`.
    """
    fd = _open_anchor(location.anchor)
    try:
        for part in parts:
            child = _open_directory(part, fd, path=path, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_target(location: Location, *, path: str, flags: int, create: bool) -> int:
    """Open the last component with ``flags | O_NOFOLLOW``; check it is a regular file."""
    dir_fd = walk_directories(location, location.parts[:-1], path=path, create=create)
    try:
        # O_NONBLOCK: opening a FIFO must not hang waiting for a peer.
        fd = os.open(
            location.parts[-1],
            flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            _FILE_MODE,
            dir_fd=dir_fd,
        )
    except FileNotFoundError:
        raise file_not_found(path) from None
    except OSError as exc:
        kind = {
            errno.ELOOP: EntryKind.SYMLINK,
            errno.EISDIR: EntryKind.DIRECTORY,
            errno.ENXIO: EntryKind.OTHER,
        }.get(exc.errno or 0)
        if kind is not None:
            check_regular(Entry(kind), path=path)
        raise _translate(exc, path) from exc
    finally:
        os.close(dir_fd)
    try:
        check_regular(Entry.from_mode(os.fstat(fd).st_mode), path=path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_workspace_dir(root: str | PathPolicy, path: str) -> str:
    """Create-if-absent the workspace directory ``path``; return its host path.

    ``root`` is the workspace's host path or a policy for it. Raises
    :class:`PathEscapeError` if any component is a symlink and
    :class:`SandboxNotFound` if the workspace is gone.
    """
    location = _policy(root).locate(path, write=True, directory=True)
    os.close(walk_directories(location, location.parts, path=path, create=True))
    return location.path


def open_workspace_dir(root: str | PathPolicy, path: str) -> int:
    """Create-if-absent the workspace directory ``path``; return a descriptor of it.

    The descriptor (close-on-exec, owned by the caller) is the directory the
    ``O_NOFOLLOW`` walk reached, so a command entering it through the
    descriptor can never land elsewhere, whatever is renamed or swapped for a
    symlink meanwhile. Raises as :func:`ensure_workspace_dir`.
    """
    location = _policy(root).locate(path, write=True, directory=True)
    return walk_directories(location, location.parts, path=path, create=True)


def open_workspace_root(root: str) -> int:
    """A descriptor (close-on-exec, owned by the caller) of the workspace root ``root``.

    One ``open`` with ``O_NOFOLLOW``: cheap enough for the event loop. Raises
    :class:`SandboxNotFound` if the workspace is gone and
    :class:`PathEscapeError` if it was replaced by a symlink.
    """
    return _open_anchor(root)


def open_workspace_file(root: str | PathPolicy, path: str) -> int:
    """Open the regular file ``path`` in the workspace for reading; return the descriptor.

    The caller closes it. Raises what :func:`read_workspace_file` raises,
    except :class:`FileTooLarge`.
    """
    location = _policy(root).locate(path)
    return _open_target(location, path=path, flags=os.O_RDONLY, create=False)


def read_chunk(fd: int, size: int, path: str) -> bytes:
    """One ``os.read`` of at most ``size`` bytes, errors mapped to the mango tree."""
    try:
        return os.read(fd, size)
    except OSError as exc:
        raise _translate(exc, path) from exc


def read_workspace_file(root: str | PathPolicy, path: str, limit: int) -> bytes:
    """Return the bytes of the regular file ``path`` in the workspace, at most ``limit`` of them.

    Raises :class:`FileTooLarge` if the file is larger than ``limit`` (checked
    with ``fstat`` before reading, and again while reading, for a file that
    grows), :class:`FileNotFoundError` if it is missing, :class:`PermanentError`
    if it is a directory or another non-regular file, :class:`PathEscapeError`
    for escapes and symlinks, and :class:`SandboxNotFound` if the workspace is gone.
    """
    fd = open_workspace_file(root, path)
    try:
        check_size(path, os.fstat(fd).st_size, limit)
        buffer = BoundedBuffer(path, limit)
        # One byte past the bound is enough to know the file outgrew it.
        while chunk := read_chunk(fd, min(READ_CHUNK_BYTES, buffer.remaining + 1), path):
            buffer.add(chunk)
        return buffer.getvalue()
    finally:
        os.close(fd)


def write_workspace_file(root: str | PathPolicy, path: str, data: bytes) -> None:
    """Create or truncate the regular file ``path`` with ``data``, creating parents.

    Files are created with mode 0o644 and directories with 0o755 (less the
    umask). Raises :class:`PathEscapeError` for escapes and symlinks,
    :class:`PermanentError` if the target is a directory or not a regular file,
    and :class:`SandboxNotFound` if the workspace is gone.
    """
    location = _policy(root).locate(path, write=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = _open_target(location, path=path, flags=flags, create=True)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        raise _translate(exc, path) from exc
    finally:
        os.close(fd)


class StagedFile:
    """A streamed write in progress: a temporary sibling of the target, renamed over it at the end.

    Made by :func:`stage_workspace_file`. :meth:`write` appends a chunk,
    :meth:`commit` renames the temporary over the target (``renameat`` in the
    directory the ``O_NOFOLLOW`` walk reached, so no swapped parent can
    redirect it), :meth:`abort` removes it; each closes the descriptors. A
    lock lets :meth:`abort` wait for a :meth:`write` still running in its
    thread (a cancelled write), so no descriptor is closed under it.
    """

    def __init__(self, dir_fd: int, fd: int, name: str, temporary: str, path: str) -> None:
        self._dir_fd = dir_fd
        self._fd = fd
        self._name = name
        self._temporary = temporary
        self._path = path
        self._lock = threading.Lock()
        self._open = True

    def write(self, data: bytes) -> None:
        """Append ``data`` to the temporary file."""
        with self._lock:
            if not self._open:
                raise ProviderUnavailable(f"the write of {self._path!r} was already ended")
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as exc:
                raise _translate(exc, self._path) from exc

    def commit(self) -> None:
        """Replace the target with the temporary file (one ``rename``), then close."""
        with self._lock:
            if not self._open:
                raise ProviderUnavailable(f"the write of {self._path!r} was already ended")
            self._open = False
            try:
                os.close(self._fd)
                # The target may have changed since the write began: still a file or nothing.
                entry = _lstat(self._name, self._dir_fd)
                if entry is not None:
                    check_regular(entry, path=self._path)
                os.rename(
                    self._temporary, self._name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd
                )
            except BaseException as exc:
                _unlink_quietly(self._temporary, self._dir_fd)
                os.close(self._dir_fd)
                if isinstance(exc, OSError):
                    raise _translate(exc, self._path) from exc
                raise
            os.close(self._dir_fd)

    def abort(self) -> None:
        """Remove the temporary file and close (idempotent; a committed write stays)."""
        with self._lock:
            if not self._open:
                return
            self._open = False
            os.close(self._fd)
            _unlink_quietly(self._temporary, self._dir_fd)
            os.close(self._dir_fd)


def _unlink_quietly(name: str, dir_fd: int) -> None:
    with contextlib.suppress(OSError):  # gone already (a command removed it): nothing to clean
        os.unlink(name, dir_fd=dir_fd)


def stage_workspace_file(root: str | PathPolicy, path: str) -> StagedFile:
    """Begin a streamed write of the regular file ``path``: its parents made, a temporary open.

    The target must be a regular file or missing (the errors of
    :func:`write_workspace_file`, raised here, before any byte is written).
    The temporary is a fresh dot name beside it (``O_EXCL``, ``O_NOFOLLOW``),
    with the target's permission bits if it exists (mode 0o644 less the
    umask otherwise), so the replaced file keeps its mode as a truncation
    would.
    """
    location = _policy(root).locate(path, write=True)
    dir_fd = walk_directories(location, location.parts[:-1], path=path, create=True)
    try:
        name = location.parts[-1]
        try:
            existing = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            existing = None
        except OSError as exc:
            raise _translate(exc, path) from exc
        if existing is not None:
            check_regular(Entry.from_mode(existing.st_mode), path=path)
        temporary = f".{name[:64]}.mango-{secrets.token_hex(8)}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(temporary, flags, _FILE_MODE, dir_fd=dir_fd)
        except OSError as exc:
            raise _translate(exc, path) from exc
        if existing is not None:
            with contextlib.suppress(OSError):  # one we cannot chmod keeps the default mode
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    except BaseException:
        os.close(dir_fd)
        raise
    return StagedFile(dir_fd, fd, name, temporary, path)
