"""Blocking file I/O on the worker's host, run from coroutines without leaking descriptors.

The Files store's local paths (``put_path``, ``download``) and the Docker
provider's host directories share these rules: a blocking call runs in a
thread, a cancelled caller waits for it to finish (:func:`blocking`) or has
what it opened undone (:func:`opened`), and a local copy replaces its target
only once its content checked out (:func:`open_target`, :func:`finish_target`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mango.domain.errors import InvalidInput

__all__ = [
    "blocking",
    "close_first",
    "discard_target",
    "finish_target",
    "open_source",
    "open_target",
    "opened",
    "write_all",
]

T = TypeVar("T")


async def blocking(function: Callable[..., T], *args: object) -> T:
    """Run ``function`` in a thread; a cancelled caller first waits for it to finish."""
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller has gone
        raise


async def opened(undo: Callable[[T], object], function: Callable[..., T], *args: object) -> T:
    """Run ``function`` (which opens something) in a thread; if cancelled, ``undo`` its result."""
    future = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def release(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                undo(done.result())

        future.add_done_callback(release)
        raise


def close_first(opened: tuple[int, object]) -> None:
    os.close(opened[0])


def discard_target(opened: tuple[int, Path | None]) -> None:
    fd, temp = opened
    os.close(fd)
    if temp is not None:
        with contextlib.suppress(OSError):
            temp.unlink()


def open_source(path: Path) -> tuple[int, int]:
    """Open ``path`` for reading: ``(fd, size)``; bad paths are :class:`InvalidInput`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput(f"no file {str(path)!r}", hint="check the path") from None
    except IsADirectoryError:
        raise _directory(path) from None
    except PermissionError:
        raise InvalidInput(
            f"cannot read {str(path)!r}: permission denied", hint="check its permissions"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _directory(path)
        raise InvalidInput(
            f"{str(path)!r} is not a regular file", hint="store a regular file (not a device)"
        )
    return fd, info.st_size


def _directory(path: Path) -> InvalidInput:
    return InvalidInput(
        f"{str(path)!r} is a directory",
        hint="store one file at a time (make an archive of a directory first)",
    )


def write_all(fd: int, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view) :]


def open_target(target: Path) -> tuple[int, Path | None]:
    """A descriptor to write ``target``'s new content to, and the temporary file (if any)."""
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        raise InvalidInput(f"{str(target)!r}: a parent is not a directory") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"{str(target)!r} is a directory", hint="name a file to write")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return os.open(target, os.O_WRONLY | os.O_CLOEXEC), None
    parent = target.parent
    if not parent.is_dir():
        raise InvalidInput(
            f"cannot write {str(target)!r}: {str(parent)!r} is not a directory",
            hint="create the directory first",
        )
    try:
        fd, name = tempfile.mkstemp(dir=parent, prefix=f".{target.name[:100]}.", suffix=".part")
    except PermissionError:
        raise InvalidInput(f"cannot write in {str(parent)!r}: permission denied") from None
    return fd, Path(name)


def finish_target(fd: int, temp: Path, target: Path) -> None:
    os.fsync(fd)
    os.fchmod(fd, 0o666 & ~_umask())  # what a plain open() would have made
    temp.replace(target)


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for every thread)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
