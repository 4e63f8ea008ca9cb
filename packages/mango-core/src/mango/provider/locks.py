"""Locks on host files that give up instead of hanging (kit helper).

A provider (or an adapter) that serializes work across processes on one
host -- starting a shared server, laying out a host directory -- holds an
exclusive ``flock`` on a lock file for the critical section. The kernel
drops the lock when its holder dies, so a crash never leaves it behind; but
a holder that is stuck would block everyone else for ever. The lock is
therefore taken by polling (``LOCK_NB``, backing off from 10 ms to 250 ms)
and a wait longer than ``timeout`` seconds becomes
:class:`~mango.provider.ProviderUnavailable` (retryable) naming the file and
what the caller was doing, instead of a silent hang:

* :func:`exclusive_lock` -- a context manager for blocking code (a thread);
* :func:`exclusive_lock_async` -- the same for a coroutine, which sleeps with
  :func:`asyncio.sleep` between attempts and so never blocks its event loop;
* :func:`file_lock_async` -- either mode for a coroutine: shared holders
  exclude only exclusive ones (a resource lock: exports shared, imports
  exclusive);
* :func:`try_exclusive_lock_async` -- one attempt, no wait: the block learns
  whether it holds the lock (a Memory Store wave joins a running one).

Each acquisition opens the file afresh, so holders in one process exclude
each other as holders in different processes do (``flock`` locks belong to
the open file description); the lock is not reentrant.

The lock file is created (mode 0600) if missing and never removed. POSIX
only, stdlib only.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator

from mango.domain.errors import ProviderUnavailable

__all__ = [
    "exclusive_lock",
    "exclusive_lock_async",
    "file_lock_async",
    "try_exclusive_lock_async",
]

_FIRST_WAIT = 0.01
_LONGEST_WAIT = 0.25


def _open(path: str | os.PathLike[str]) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _locked(fd: int, *, exclusive: bool = True) -> bool:
    """Take the lock now if no holder excludes it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _pauses(
    fd: int, path: str | os.PathLike[str], timeout: float, what: str, *, exclusive: bool = True
) -> Iterator[float]:
    """Take the lock on ``fd``, yielding the pause to make before each further attempt.

    Ends once the lock is held; :class:`ProviderUnavailable` when ``timeout`` is spent.
    """
    deadline = time.monotonic() + timeout
    delay = _FIRST_WAIT
    while not _locked(fd, exclusive=exclusive):
        if time.monotonic() >= deadline:
            raise ProviderUnavailable(
                f"another process held {os.fspath(path)} for more than {timeout:g} s while {what}",
                hint="wait for the other mango process to finish, then retry",
            )
        yield delay
        delay = min(delay * 2, _LONGEST_WAIT)


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str], *, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block (blocking code).

    ``what`` says what the caller is doing, for the error if the lock is held
    for more than ``timeout`` seconds by another process.
    """
    fd = _open(path)
    try:
        for pause in _pauses(fd, path, timeout, what):
            time.sleep(pause)
        yield
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def exclusive_lock_async(
    path: str | os.PathLike[str], *, timeout: float, what: str
) -> AsyncIterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block (a coroutine; the loop never blocks).

    The same rules as :func:`exclusive_lock`. Cancelling the waiting task
    gives up the wait and closes the file.
    """
    async with file_lock_async(path, exclusive=True, timeout=timeout, what=what):
        yield


@contextlib.asynccontextmanager
async def file_lock_async(
    path: str | os.PathLike[str], *, exclusive: bool, timeout: float, what: str
) -> AsyncIterator[None]:
    """Hold a shared or exclusive ``flock`` on ``path`` for the block (a coroutine).

    Shared holders exclude exclusive ones only; otherwise the rules of
    :func:`exclusive_lock`. Cancelling the waiting task gives up the wait and
    closes the file.
    """
    fd = _open(path)
    try:
        for pause in _pauses(fd, path, timeout, what, exclusive=exclusive):
            await asyncio.sleep(pause)
        yield
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def try_exclusive_lock_async(path: str | os.PathLike[str]) -> AsyncIterator[bool]:
    """Try once to take an exclusive ``flock`` on ``path``; yield whether it is held.

    False (holding nothing) if any holder, shared or exclusive, has it now.
    """
    fd = _open(path)
    try:
        yield _locked(fd, exclusive=True)
    finally:
        os.close(fd)
