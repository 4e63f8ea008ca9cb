"""The filesystem Files store: blobs as files below one directory (the default).

Layout below the root (created 0700)::

    <root>/.incoming/<random>.part     a put in progress (never a blob)
    <root>/<key>                       a published blob, mode 0444

A put streams into a temporary file in ``.incoming`` (same filesystem, so
the final ``rename`` is atomic), counting and hashing as it writes; only
when the bytes are verified is the file fsynced, its size read back,
renamed onto ``<root>/<key>`` and the directory fsynced. A failed, cancelled
or killed put leaves at most a ``.part`` file, which
:meth:`FilesystemFileStore.discard_incomplete` removes once it is old.

Blocking calls run in worker threads; a cancelled caller waits for the call
in flight before the descriptor it uses is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import attrs

from mango.domain.errors import (
    ConfigurationError,
    ContentMismatch,
    FileStoreUnavailable,
    InvalidInput,
)
from mango.domain.files import BlobEntry, BlobInfo, ContentCheck, validate_blob_key
from mango.provider.reads import ThreadedChunks

__all__ = ["CHUNK_BYTES", "INCOMING_DIR", "FilesystemFileStore"]

T = TypeVar("T")

CHUNK_BYTES = 1024 * 1024
"""Reads are at most this many bytes; memory stays O(chunk)."""
INCOMING_DIR = ".incoming"
"""Below the root: puts in progress (no key can name it: keys start with a letter or digit)."""
_DIR_MODE = 0o700
_BLOB_MODE = 0o444


async def _blocking(function: Callable[..., T], *args: object) -> T:
    """Run ``function`` in a thread; if the caller is cancelled, wait for it to finish first.

    So a descriptor the call uses is never closed (and its number reused)
    while the thread still writes to it.
    """
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller has gone
        raise


async def _opened(undo: Callable[[T], object], function: Callable[..., T], *args: object) -> T:
    """Run ``function`` (which acquires something) in a thread, like :func:`_blocking`.

    A caller cancelled meanwhile does not wait: ``undo`` releases whatever the
    call acquires once it finishes.
    """
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def release(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                undo(done.result())

        future.add_done_callback(release)
        raise


def _close_fd(fd: int) -> None:
    os.close(fd)


def _discard_temp(created: tuple[int, Path]) -> None:
    fd, temp = created
    os.close(fd)
    with contextlib.suppress(OSError):
        temp.unlink()


def _write_all(fd: int, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(root: Path, relative: Path) -> Path:
    """Create ``root/relative`` component by component (0700), fsyncing each new entry."""
    current = root
    for part in relative.parts:
        child = current / part
        try:
            child.mkdir(mode=_DIR_MODE)
        except FileExistsError:
            if not stat.S_ISDIR(child.lstat().st_mode):
                raise ConfigurationError(
                    f"{child} is in the file store's way: it is not a directory"
                ) from None
        else:
            _fsync_dir(current)
        current = child
    return current


@attrs.define
class FilesystemFileStore:
    """A :class:`~mango.domain.files.FileStore` in the directory ``root`` (absolute)."""

    root: Path = attrs.field(converter=Path)

    def __attrs_post_init__(self) -> None:
        if not self.root.is_absolute():
            raise ConfigurationError(f"the file store directory must be absolute, got {self.root}")

    @property
    def location(self) -> str:
        """The root directory."""
        return str(self.root)

    @contextlib.contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        """OS errors as mango errors, except ``FileNotFoundError`` (the caller decides)."""
        try:
            yield
        except PermissionError as exc:
            raise ConfigurationError(
                f"the file store at {self.root} refused {action}: {exc.strerror}",
                hint="give mango's user write access to that directory, or set "
                "MANGO_FILE_STORE_DIR to one it owns",
            ) from exc
        except FileNotFoundError:
            raise
        except OSError as exc:
            hint = (
                "free space on that filesystem, then retry"
                if exc.errno in {errno.ENOSPC, errno.EDQUOT}
                else "check the filesystem, then retry"
            )
            raise FileStoreUnavailable(
                f"the file store at {self.root} failed while {action}: "
                f"{exc.strerror or type(exc).__name__}",
                hint=hint,
            ) from exc

    def _path(self, key: str) -> Path:
        return self.root / validate_blob_key(key)

    # ------------------------------------------------------------------ put

    def _create_temp(self) -> tuple[int, Path]:
        self.root.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        incoming = _make_dirs(self.root, Path(INCOMING_DIR))
        fd, name = tempfile.mkstemp(dir=incoming, prefix="put-", suffix=".part")
        return fd, Path(name)

    def _publish(self, fd: int, temp: Path, target: Path, size: int) -> None:
        os.fsync(fd)
        stored = os.fstat(fd).st_size
        if stored != size:
            raise ContentMismatch(
                f"the file store at {self.root} kept {stored} of the {size} bytes written",
                expected_size=size,
                size=stored,
            )
        os.fchmod(fd, _BLOB_MODE)
        parent = _make_dirs(self.root, target.relative_to(self.root).parent)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise ConfigurationError(f"{target} is in the file store's way: not a regular file")
        temp.replace(target)
        _fsync_dir(parent)
        _fsync_dir(temp.parent)

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> BlobInfo:
        """Stream ``chunks`` into a temporary file, verify, then publish it atomically."""
        target = self._path(key)
        check = ContentCheck(f"the content for {key!r}", size=size, sha256=sha256)
        with self._translated("creating a temporary file"):
            fd, temp = await _opened(_discard_temp, self._create_temp)
        published = False
        try:
            async for chunk in chunks:
                check.update(chunk)
                with self._translated("writing"):
                    await _blocking(_write_all, fd, chunk)
            info = check.finish()
            with self._translated(f"publishing {key!r}"):
                await _blocking(self._publish, fd, temp, target, info.size)
            published = True
            return info
        finally:
            os.close(fd)
            if not published:
                with contextlib.suppress(OSError):
                    temp.unlink()

    # ------------------------------------------------------------------ open

    def _open_blob(self, path: Path) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
        return fd

    @contextlib.asynccontextmanager
    async def open(
        self, key: str, *, size: int | None = None, sha256: str | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``<root>/<key>`` in chunks of at most 1 MiB, verified as they pass."""
        path = self._path(key)
        check = ContentCheck(
            f"the stored content of {key!r}", size=size, sha256=sha256, digest=False
        )
        with self._translated(f"opening {key!r}"):  # FileNotFoundError passes through
            fd = await _opened(_close_fd, self._open_blob, path)

        def read() -> bytes:
            with self._translated(f"reading {key!r}"):
                return os.read(fd, CHUNK_BYTES)

        reader = ThreadedChunks(read)
        verified = _verified(reader, check)
        try:
            yield verified
        finally:
            await verified.aclose()
            await reader.aclose()
            os.close(fd)

    # ------------------------------------------------------------------ delete, scan

    def _delete(self, path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        _fsync_dir(path.parent)
        return True

    async def delete(self, key: str) -> bool:
        """Unlink the blob and fsync its directory; False if it was not there."""
        path = self._path(key)
        with self._translated(f"deleting {key!r}"):
            return await _blocking(self._delete, path)

    async def scan(self, prefix: str) -> AsyncIterator[BlobEntry]:
        """Walk the directory of ``prefix``, one directory listing at a time."""
        if prefix:
            if not prefix.endswith("/"):
                raise InvalidInput(f"scan prefix {prefix!r} must end with '/'")
            validate_blob_key(prefix[:-1])
        pending = [self.root / prefix] if prefix else [self.root]
        while pending:
            directory = pending.pop()
            with self._translated("listing blobs"):
                try:
                    entries = await _blocking(_list_dir, directory)
                except FileNotFoundError:
                    continue
            for name, is_dir, size, mtime in entries:
                path = directory / name
                if directory == self.root and name == INCOMING_DIR:
                    continue
                if is_dir:
                    pending.append(path)
                    continue
                key = path.relative_to(self.root).as_posix()
                yield BlobEntry(key, size, datetime.fromtimestamp(mtime, UTC))

    def _discard(self, older_than: timedelta) -> int:
        incoming = self.root / INCOMING_DIR
        cutoff = datetime.now(UTC).timestamp() - older_than.total_seconds()
        removed = 0
        try:
            entries = _list_dir(incoming)
        except FileNotFoundError:
            return 0
        for name, is_dir, _, mtime in entries:
            if not is_dir and mtime <= cutoff:
                with contextlib.suppress(FileNotFoundError):
                    (incoming / name).unlink()
                    removed += 1
        if removed:
            _fsync_dir(incoming)
        return removed

    async def discard_incomplete(self, older_than: timedelta) -> int:
        """Remove ``.incoming`` files last written at least ``older_than`` ago."""
        with self._translated("removing interrupted puts"):
            return await _blocking(self._discard, older_than)

    async def aclose(self) -> None:
        """Nothing to release: every call opens and closes its own descriptors."""


def _list_dir(directory: Path) -> list[tuple[str, bool, int, float]]:
    """``(name, is_dir, size, mtime)`` of each entry; symlinks and specials are skipped."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                found.append((entry.name, True, 0, info.st_mtime))
            elif stat.S_ISREG(info.st_mode):
                found.append((entry.name, False, info.st_size, info.st_mtime))
    return found


async def _verified(
    chunks: AsyncIterator[bytes], check: ContentCheck
) -> AsyncGenerator[bytes, None]:
    async for chunk in chunks:
        check.update(chunk)
        yield chunk
    check.finish()
