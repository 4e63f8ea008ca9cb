"""Memory Store mounts kept in a provider-owned host directory (kit helper).

A provider that bind-mounts host directories into its sandboxes (Docker:
``<host dir>/memory/<slug>`` at ``/mnt/memory/<slug>``) implements the
reading and refreshing half of :class:`~mango.domain.ports.MemoryStoreSandbox`
with :class:`HostMemoryStores`:

* the **baseline** of a mount is a JSON manifest in the state directory
  (never mounted): ``<state>/memory-<sha256("memory\\0" + store id)>.json``,
  ``{"version": 1, "store_id": ..., "files": [{"memory_id", "path",
  "content_sha256"}]}`` sorted by path;
* **read** walks the mount without following anything: a symlink, a FIFO, a
  device or a socket is :class:`~mango.domain.errors.InvalidMemory` naming
  it, as are a path or content the memory rules refuse (the file is named)
  and more than 2000 files;
* **replace** validates everything first, removes the manifest (so an
  interrupted refresh reads back as "no baseline", never as edits against an
  old one), removes from the mount whatever is not a given file with its
  content (a file that holds it already stays), writes the others in place
  (0644, fsynced, sixteen at a time), fsyncs the directories and writes the
  manifest last.

Neither takes the resource lock: the caller holds it exclusively across a
read, the database writeback and the replace. Files the sandbox created are
removed by the worker's user; a sandbox running as another user than the
worker must leave them removable (a root worker, or matching users).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from mango.domain.errors import InvalidMemory, PermanentError, ProviderUnavailable
from mango.domain.memories import (
    MAX_MEMORY_CONTENT_BYTES,
    MAX_MEMORY_FILES,
    BaselineEntry,
    MemoryFile,
    MemorySnapshot,
    MemoryStoreMount,
    check_files,
    check_memory_content,
    content_sha256,
    validate_memory_path,
)

__all__ = ["MEMORY_DIRECTORY_MODE", "MEMORY_FILE_MODE", "HostMemoryStores"]

MEMORY_FILE_MODE = 0o644
MEMORY_DIRECTORY_MODE = 0o755
_TEMP = ".mango-memory-"
_MANIFEST_VERSION = 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(directory: Path, target: Path, data: bytes, mode: int) -> None:
    fd, name = tempfile.mkstemp(dir=directory, prefix=_TEMP)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        Path(name).unlink(missing_ok=True)
        raise
    os.close(fd)
    Path(name).replace(target)


@attrs.frozen
class HostMemoryStores:
    """Mounts below ``memory_root`` (``<slug>/`` each), baselines in ``state_root``."""

    memory_root: Path
    state_root: Path

    def directory(self, mount: MemoryStoreMount) -> Path:
        """The host side of ``mount``: ``<memory root>/<slug>``."""
        return self.memory_root / mount.slug

    def manifest(self, mount: MemoryStoreMount) -> Path:
        """Where the baseline of ``mount`` is recorded."""
        tag = hashlib.sha256(b"memory\0" + mount.store_id.encode()).hexdigest()
        return self.state_root / f"memory-{tag}.json"

    @contextlib.contextmanager
    def _host_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (PermanentError, InvalidMemory):
            raise
        except OSError as exc:
            raise ProviderUnavailable(f"{what} under {self.memory_root}: {exc}") from exc

    def ensure(self, mount: MemoryStoreMount) -> Path:
        """Create-if-absent the mount's directory (0755, a real directory)."""
        path = self.directory(mount)
        with self._host_errors("creating a memory store mount"):
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=MEMORY_DIRECTORY_MODE)
            if not stat.S_ISDIR(path.lstat().st_mode):
                raise PermanentError(f"{path} is not a plain directory")
            path.chmod(MEMORY_DIRECTORY_MODE)
        return path

    # ------------------------------------------------------------------ read

    async def read(self, mount: MemoryStoreMount) -> MemorySnapshot:
        """The baseline and the files of ``mount`` (see the module)."""
        return await asyncio.to_thread(self._read, mount)

    def _read(self, mount: MemoryStoreMount) -> MemorySnapshot:
        with self._host_errors("reading a memory store"):
            baseline = self._baseline(mount)
            files = self._walk(mount)
        return MemorySnapshot(baseline is not None, baseline or (), files)

    def _baseline(self, mount: MemoryStoreMount) -> tuple[BaselineEntry, ...] | None:
        try:
            text = self.manifest(mount).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        problem = "another version or store"
        try:
            document = json.loads(text)
            if document["version"] == _MANIFEST_VERSION and document["store_id"] == mount.store_id:
                return tuple(
                    BaselineEntry(str(f["memory_id"]), str(f["path"]), str(f["content_sha256"]))
                    for f in document["files"]
                )
        except (ValueError, KeyError, TypeError) as exc:
            problem = str(exc)
        raise PermanentError(
            f"the memory baseline of store {mount.store_id} is invalid: {problem}",
            hint="delete the Session and start it again",
        )

    def _walk(self, mount: MemoryStoreMount) -> tuple[MemoryFile, ...]:
        found: list[MemoryFile] = []
        with _root_fd(self.directory(mount)) as root:
            self._walk_dir(mount, root, "", found)
        return tuple(sorted(found, key=lambda item: item.path))

    def _walk_dir(
        self, mount: MemoryStoreMount, fd: int, prefix: str, found: list[MemoryFile]
    ) -> None:
        """Read every file below the directory ``fd`` (``prefix`` its path in the store).

        Every name is opened relative to its directory's descriptor and never
        followed, so a command racing the walk (swapping a directory for a
        link) can at most make it fail, never make it read outside the mount.
        """
        for entry in _entries(fd):
            relative = f"{prefix}/{entry.name}"
            where = f"{mount.runtime_path}{relative}"
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                with _child_fd(fd, entry.name, relative) as child:
                    self._walk_dir(mount, child, relative, found)
                continue
            if stat.S_ISLNK(info.st_mode):
                raise InvalidMemory(
                    f"memory {relative!r} ({where}) is a symbolic link; a memory store "
                    "holds regular files only",
                    path=relative,
                )
            if not stat.S_ISREG(info.st_mode):
                raise InvalidMemory(
                    f"memory {relative!r} ({where}) is not a regular file; a memory "
                    "store holds regular files only",
                    path=relative,
                )
            validate_memory_path(relative)
            if info.st_size > MAX_MEMORY_CONTENT_BYTES:
                check_memory_content(relative, b"\0" * info.st_size)  # raises: too large
            if len(found) >= MAX_MEMORY_FILES:
                raise InvalidMemory(
                    f"{mount.runtime_path} holds more than {MAX_MEMORY_FILES} files", path="/"
                )
            data = _read_regular(fd, entry.name, relative, MAX_MEMORY_CONTENT_BYTES + 1)
            found.append(MemoryFile(relative, check_memory_content(relative, data)))

    # ------------------------------------------------------------------ replace

    async def replace(self, mount: MemoryStoreMount, files: Sequence[MemoryFile]) -> None:
        """Make the mount hold exactly ``files``; the new baseline last (see the module)."""
        check_files(files)
        for item in files:
            if not item.memory_id:
                raise InvalidMemory(f"memory {item.path!r} has no memory id", path=item.path)
        await asyncio.to_thread(self._replace, mount, files)

    def _replace(self, mount: MemoryStoreMount, files: Sequence[MemoryFile]) -> None:
        root = self.directory(mount)
        wanted = {item.path[1:]: item.content.encode("utf-8") for item in files}
        needed = {
            parent.as_posix()
            for relative in wanted
            for parent in Path(relative).parents
            if parent != Path()
        }
        with self._host_errors("refreshing a memory store"):
            self.manifest(mount).unlink(missing_ok=True)
            _fsync_dir(self.state_root)
            kept: set[str] = set()
            with _root_fd(root) as top:
                _prune(top, "", wanted, needed, kept)
                # No manifest while the files are written: an interrupted refresh reads back
                # as "no baseline" and is simply refreshed again, so each file is written in
                # place (no temporary and rename), a file that holds its content already is
                # kept, and the fsyncs run in parallel (the journal commits them together).
                missing = [relative for relative in wanted if relative not in kept]
                by_directory: dict[str, list[str]] = {}
                for relative in missing:
                    parent, _, name = relative.rpartition("/")
                    by_directory.setdefault(parent, []).append(name)
                for directory in sorted(needed | {""}, key=len):
                    with _directory_fd(top, directory) as fd:
                        names = by_directory.get(directory, [])
                        with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
                            list(
                                pool.map(
                                    lambda name, fd=fd, directory=directory: _write_new(
                                        fd, name, wanted[f"{directory}/{name}".lstrip("/")]
                                    ),
                                    names,
                                )
                            )
                        os.fsync(fd)
            document: dict[str, Any] = {
                "version": _MANIFEST_VERSION,
                "store_id": mount.store_id,
                "files": [
                    {
                        "memory_id": item.memory_id,
                        "path": item.path,
                        "content_sha256": content_sha256(item.content),
                    }
                    for item in sorted(files, key=lambda f: f.path)
                ],
            }
            _write_atomic(
                self.state_root,
                self.manifest(mount),
                json.dumps(document, sort_keys=True).encode(),
                0o600,
            )
            _fsync_dir(self.state_root)


_WRITERS = 16
"""Threads writing (and fsyncing) a refresh's files."""
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def _root_fd(root: Path) -> Iterator[int]:
    """The mount's host directory, opened (it must be a real directory)."""
    try:
        fd = os.open(root, _DIRECTORY)
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise PermanentError(f"the memory mount {root} is missing") from exc
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PermanentError(f"the memory mount {root} is not a directory") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _child_fd(parent: int, name: str, relative: str) -> Iterator[int]:
    """The directory ``name`` below ``parent``, never through a link."""
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise InvalidMemory(
                f"memory directory {relative!r} changed into a link or a file while it was read",
                path=relative,
            ) from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _directory_fd(top: int, relative: str) -> Iterator[int]:
    """The directory ``relative`` below ``top``, each component made (0755) if missing."""
    fd = os.dup(top)
    try:
        for part in [p for p in relative.split("/") if p]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, MEMORY_DIRECTORY_MODE, dir_fd=fd)
            child = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            os.fchmod(fd, MEMORY_DIRECTORY_MODE)  # the umask must not narrow it
        yield fd
    finally:
        os.close(fd)


def _entries(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as entries:
        return list(entries)


def _write_new(directory: int, name: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, MEMORY_FILE_MODE, dir_fd=directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, MEMORY_FILE_MODE)  # the umask must not narrow it
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_regular(directory: int, name: str) -> int | None:
    try:
        return os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=directory
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            return None
        raise


def _read_regular(directory: int, name: str, relative: str, limit: int) -> bytes:
    fd = _open_regular(directory, name)
    if fd is None:
        raise InvalidMemory(f"memory {relative!r} changed while it was read", path=relative)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the scan
            raise InvalidMemory(f"memory {relative!r} is not a regular file", path=relative)
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _prune(
    fd: int, prefix: str, wanted: dict[str, bytes], needed: set[str], kept: set[str]
) -> None:
    """Remove below the directory ``fd`` all that is not a wanted file with its content
    (by name relative to ``fd``, never through a link); record the files kept in ``kept``."""
    os.fchmod(fd, MEMORY_DIRECTORY_MODE)  # a command may have taken our access
    for entry in _entries(fd):
        relative = f"{prefix}/{entry.name}".lstrip("/")
        if entry.is_dir(follow_symlinks=False):
            with _child_fd(fd, entry.name, "/" + relative) as child:
                _prune(child, relative, wanted, needed, kept)
            if relative not in needed:
                os.rmdir(entry.name, dir_fd=fd)
            continue
        data = wanted.get(relative)
        if data is not None and _holds(fd, entry.name, data):
            kept.add(relative)
        else:
            os.unlink(entry.name, dir_fd=fd)


def _holds(directory: int, name: str, data: bytes) -> bool:
    """True if ``name`` is a 0644 regular file of exactly ``data``."""
    fd = _open_regular(directory, name)
    if fd is None:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
            return False
        if stat.S_IMODE(info.st_mode) != MEMORY_FILE_MODE:
            return False
        return os.read(fd, len(data) + 1) == data
    finally:
        os.close(fd)
