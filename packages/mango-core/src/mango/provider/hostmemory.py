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
        root = self.directory(mount)
        if not stat.S_ISDIR(root.lstat().st_mode):
            raise PermanentError(f"the memory mount {root} is not a directory")
        found: list[MemoryFile] = []
        pending = [root]
        while pending:
            directory = pending.pop()
            with os.scandir(directory) as entries:
                for entry in entries:
                    path = Path(entry.path)
                    relative = "/" + path.relative_to(root).as_posix()
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(path)
                        continue
                    where = f"{mount.runtime_path}{relative}"
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
                            f"{mount.runtime_path} holds more than {MAX_MEMORY_FILES} files",
                            path="/",
                        )
                    data = _read_regular(path, relative, MAX_MEMORY_CONTENT_BYTES + 1)
                    found.append(MemoryFile(relative, check_memory_content(relative, data)))
        return tuple(sorted(found, key=lambda item: item.path))

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
            _prune(root, root, wanted, needed, kept)
            for directory in sorted(needed, key=len):
                _make_parents(root, root / directory)
            # No manifest while the files are written: an interrupted refresh reads back as
            # "no baseline" and is simply refreshed again, so each file is written in place
            # (no temporary and rename), a file that holds its content already is kept, and
            # the fsyncs run in parallel (the filesystem's journal commits them together).
            missing = [relative for relative in wanted if relative not in kept]
            with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
                list(pool.map(lambda rel: _write_new(root / rel, wanted[rel]), missing))
            for directory in sorted(needed, key=len, reverse=True):
                _fsync_dir(root / directory)
            _fsync_dir(root)
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


def _write_new(target: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, MEMORY_FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, MEMORY_FILE_MODE)  # the umask must not narrow it
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_regular(path: Path, relative: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the scan
            raise InvalidMemory(f"{path} is not a regular file", path=relative)
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
    directory: Path, root: Path, wanted: dict[str, bytes], needed: set[str], kept: set[str]
) -> None:
    """Remove below ``directory`` all that is not a wanted file with its content (never
    following a link); record the files kept in ``kept``."""
    directory.chmod(MEMORY_DIRECTORY_MODE)  # a command may have taken our access
    for entry in list(os.scandir(directory)):
        path = Path(entry.path)
        relative = path.relative_to(root).as_posix()
        if entry.is_dir(follow_symlinks=False):
            _prune(path, root, wanted, needed, kept)
            if relative not in needed:
                path.rmdir()
            continue
        data = wanted.get(relative)
        if data is not None and entry.is_file(follow_symlinks=False) and _holds(path, data):
            kept.add(relative)
        else:
            path.unlink()


def _holds(path: Path, data: bytes) -> bool:
    """True if ``path`` is a 0644 regular file of exactly ``data``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
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


def _make_parents(root: Path, parent: Path) -> None:
    current = root
    for part in parent.relative_to(root).parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir(mode=MEMORY_DIRECTORY_MODE)
        current.chmod(MEMORY_DIRECTORY_MODE)
