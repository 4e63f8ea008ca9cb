"""File Resources kept in a provider-owned host directory (kit helper).

A provider that bind-mounts a host directory read-only into its sandboxes
(Docker: ``<host dir>/files`` at ``/mnt/session/uploads``) keeps the copies
there with :class:`HostFileResources`, which implements the contract of
:class:`~mango.domain.ports.FileResourceSandbox` on the worker's side:

* **import**: the bytes stream into a temporary file *in the target's
  directory* (``.mango-resource-<path tag>-<random>``, so the rename is
  atomic), counted and hashed as they pass (:class:`ContentMismatch`
  otherwise), fsynced, made ``0444``, renamed onto the target, the directory
  fsynced; then the marker (``<state>/<sha256 of the path>``:
  ``identity\\nsize\\nsha256\\n``, written to a temporary file and renamed)
  is written. A failure before the rename removes the temporary file, so the
  previous copy stays visible.
* **has**: the target is a regular file with no write bit and the expected
  size, and the marker names the identity, size and digest (no re-hash).
* **remove**: if the marker names another identity (a newer resource reused
  the path) nothing is touched; otherwise the copy, any temporary file an
  interrupted import left for the path, and the marker go, and parents left
  empty are pruned. Repeating it finishes what a crash cut short.

Every operation holds the directory's lock (:func:`~mango.provider.locks.file_lock_async`
on ``<state>/.lock``): shared for ``has``, exclusive for import and removal,
so processes on one host never interleave on one sandbox. The state
directory is never mounted into the sandbox.

:func:`observe_imports` lets crash-injection tests stop the process between
the steps of an import (``written``: the temporary file is complete;
``renamed``: the copy is in place, its marker not yet written).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Literal

import attrs

from mango.domain.errors import InvalidInput, PermanentError, ProviderUnavailable
from mango.domain.files import ContentCheck
from mango.domain.resources import FileResourceMount, check_mount_path, validate_identity
from mango.provider.locks import file_lock_async

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "IMPORT_PREFIX",
    "LOCK_TIMEOUT_SECONDS",
    "HostFileResources",
    "ImportStep",
    "fsync_dir",
    "observe_imports",
    "resource_lock",
    "write_all",
]

FILE_MODE = 0o444
DIRECTORY_MODE = 0o755
IMPORT_PREFIX = ".mango-resource-"
"""Start of an import's temporary file name (in the target's directory)."""
LOCK_TIMEOUT_SECONDS = 600.0
"""How long an operation waits for the lock (a large import holds it that long at most)."""
_MARKER_TEMP = ".mango-marker-"

ImportStep = Literal["written", "renamed"]
_observers: list[Callable[[ImportStep, Path], None]] = []


def observe_imports(observer: Callable[[ImportStep, Path], None]) -> Callable[[], None]:
    """Call ``observer(step, target)`` after each step of every import; return the undo.

    For crash-injection tests only (:mod:`mango.temporal.faults`).
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def _notify(step: ImportStep, target: Path) -> None:
    for observer in _observers:
        observer(step, target)


def _tag(runtime_path: str) -> str:
    return hashlib.sha256(runtime_path.encode("utf-8")).hexdigest()


def _marker_body(mount: FileResourceMount) -> bytes:
    return f"{mount.identity}\n{mount.size}\n{mount.sha256}\n".encode()


def fsync_dir(path: Path) -> None:
    """Make the entries of the directory ``path`` durable (its own fsync)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _read_ahead(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """``chunks``, with the next one already being read while the caller works on one."""
    iterator = aiter(chunks)
    pending = asyncio.ensure_future(anext(iterator))
    try:
        while True:
            try:
                chunk = await pending
            except StopAsyncIteration:
                return
            pending = asyncio.ensure_future(anext(iterator))
            yield chunk
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        elif not pending.cancelled() and pending.exception() is not None:
            pending.exception()  # retrieved: a failure the caller no longer waits for


def write_all(fd: int, chunk: bytes) -> None:
    """Write all of ``chunk`` to ``fd`` (``os.write`` may write less)."""
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view) :]


def resource_lock(
    state_root: Path, *, exclusive: bool, timeout: float = LOCK_TIMEOUT_SECONDS
) -> contextlib.AbstractAsyncContextManager[None]:
    """The resource lock of a sandbox's host directory: ``<state>/.lock``, shared by every kind."""
    return file_lock_async(
        state_root / ".lock",
        exclusive=exclusive,
        timeout=timeout,
        what="importing or exporting a sandbox's resources",
    )


@attrs.frozen
class HostFileResources:
    """Copies below ``files_root`` (mounted read-only), markers and the lock in ``state_root``."""

    files_root: Path
    state_root: Path
    lock_timeout: float = LOCK_TIMEOUT_SECONDS

    def lock(self, *, exclusive: bool) -> contextlib.AbstractAsyncContextManager[None]:
        """The resource lock of the directory (``<state>/.lock``)."""
        return resource_lock(self.state_root, exclusive=exclusive, timeout=self.lock_timeout)

    def _target(self, runtime_path: str) -> Path:
        return self.files_root / check_mount_path(runtime_path).split("/", 4)[4]

    def _marker(self, runtime_path: str) -> Path:
        return self.state_root / _tag(runtime_path)

    @contextlib.contextmanager
    def _host_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except PermanentError:
            raise
        except OSError as exc:
            raise ProviderUnavailable(f"{what} under {self.files_root.parent}: {exc}") from exc

    # ------------------------------------------------------------------ has

    async def has(self, mount: FileResourceMount) -> bool:
        """Whether the copy and marker of ``mount`` are in place (see the module)."""
        async with self.lock(exclusive=False):
            return await asyncio.to_thread(self._has, mount)

    def _has(self, mount: FileResourceMount) -> bool:
        with self._host_errors("checking a file resource"):
            try:
                info = self._target(mount.runtime_path).lstat()
                marker = self._marker(mount.runtime_path).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return False
        return (
            stat.S_ISREG(info.st_mode)
            and not info.st_mode & 0o222
            and info.st_size == mount.size
            and marker == _marker_body(mount)
        )

    # ------------------------------------------------------------------ import

    async def import_(self, mount: FileResourceMount, chunks: AsyncIterable[bytes]) -> None:
        """Copy ``chunks`` to the mount's path, all or nothing (see the module)."""
        async with self.lock(exclusive=True):
            target = self._target(mount.runtime_path)
            fd, temp = await asyncio.to_thread(self._begin, mount.runtime_path, target)
            published = False
            try:
                check = ContentCheck(
                    f"file resource {mount.runtime_path!r}", size=mount.size, sha256=mount.sha256
                )
                async for chunk in _read_ahead(chunks):
                    # Hashing and writing overlap (hashlib releases the GIL), and the
                    # next chunk is read meanwhile: the copy goes at about disk speed.
                    await asyncio.gather(
                        asyncio.to_thread(check.update, chunk),
                        asyncio.to_thread(write_all, fd, chunk),
                    )
                check.finish()
                await asyncio.to_thread(self._publish, fd, temp, target)
                published = True
            finally:
                os.close(fd)
                if not published:
                    with contextlib.suppress(OSError):
                        temp.unlink()
            await asyncio.to_thread(self._write_marker, mount)

    def _begin(self, runtime_path: str, target: Path) -> tuple[int, Path]:
        with self._host_errors("importing a file resource"):
            self._make_parents(target.parent)
            self._drop_temps(runtime_path, target.parent)
            fd, name = tempfile.mkstemp(
                dir=target.parent, prefix=f"{IMPORT_PREFIX}{_tag(runtime_path)[:16]}-"
            )
        return fd, Path(name)

    def _make_parents(self, parent: Path) -> None:
        """Create each directory from the files root down to ``parent`` (real directories only)."""
        current = self.files_root
        for part in parent.relative_to(self.files_root).parts:
            current = current / part
            with contextlib.suppress(FileExistsError):
                current.mkdir(mode=DIRECTORY_MODE)
            if not stat.S_ISDIR(current.lstat().st_mode):
                raise InvalidInput(
                    f"cannot mount a file below {current}: a file resource is there already",
                    hint="two resources may not be nested; remove the other one first",
                )
            current.chmod(DIRECTORY_MODE)  # the umask must not narrow it

    def _drop_temps(self, runtime_path: str, directory: Path) -> None:
        prefix = f"{IMPORT_PREFIX}{_tag(runtime_path)[:16]}-"
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in directory.iterdir():
                if entry.name.startswith(prefix):
                    entry.unlink(missing_ok=True)

    def _publish(self, fd: int, temp: Path, target: Path) -> None:
        with self._host_errors("importing a file resource"):
            os.fsync(fd)
            os.fchmod(fd, FILE_MODE)
            _notify("written", target)
            try:
                temp.rename(target)
            except IsADirectoryError:
                raise InvalidInput(
                    f"cannot mount a file at {target}: a directory of other resources is there",
                    hint="two resources may not be nested; remove the other ones first",
                ) from None
            fsync_dir(target.parent)
        _notify("renamed", target)

    def _write_marker(self, mount: FileResourceMount) -> None:
        with self._host_errors("recording a file resource"):
            fd, name = tempfile.mkstemp(dir=self.state_root, prefix=_MARKER_TEMP)
            try:
                write_all(fd, _marker_body(mount))
                os.fsync(fd)
            finally:
                os.close(fd)
            Path(name).replace(self._marker(mount.runtime_path))
            fsync_dir(self.state_root)

    # ------------------------------------------------------------------ remove

    async def remove(self, runtime_path: str, identity: str) -> None:
        """Remove ``identity``'s copy at ``runtime_path`` (unless a newer one holds it)."""
        check_mount_path(runtime_path)
        validate_identity(identity)
        async with self.lock(exclusive=True):
            await asyncio.to_thread(self._remove, runtime_path, identity)

    def _remove(self, runtime_path: str, identity: str) -> None:
        marker = self._marker(runtime_path)
        target = self._target(runtime_path)
        with self._host_errors("removing a file resource"):
            try:
                recorded = marker.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
            except FileNotFoundError:
                recorded = None
            if recorded is not None and recorded != identity:
                return  # a newer resource reused the path: not ours to remove
            self._drop_temps(runtime_path, target.parent)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if not stat.S_ISDIR(target.lstat().st_mode):
                    target.unlink()
            marker.unlink(missing_ok=True)
            self._prune(target.parent)
            fsync_dir(self.files_root)

    def _prune(self, directory: Path) -> None:
        """Remove empty directories from ``directory`` up to (not including) the files root."""
        while directory != self.files_root and self.files_root in directory.parents:
            try:
                directory.rmdir()
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    if exc.errno != errno.ENOENT:
                        return
                else:
                    raise
            directory = directory.parent
