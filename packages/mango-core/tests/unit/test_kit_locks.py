"""The kit's host file locks: exclusive, polled, and an error instead of a hang."""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mango.provider import ProviderUnavailable
from mango.provider.locks import exclusive_lock, exclusive_lock_async


@contextmanager
def held_elsewhere(path: Path) -> Iterator[None]:
    """Hold the lock through a second open file description, as another process would."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def locked_by_someone(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_lock_is_exclusive_and_released_on_exit(tmp_path: Path) -> None:
    """Inside the block nobody else gets the lock; after it, anyone does. The file stays."""
    path = tmp_path / "server.lock"
    with exclusive_lock(path, timeout=1, what="starting"):
        assert locked_by_someone(path)
    assert not locked_by_someone(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_stuck_holder_is_an_error_naming_the_file_and_the_work(tmp_path: Path) -> None:
    """Held elsewhere past the timeout: ProviderUnavailable (retryable), not a hang."""
    path = tmp_path / "server.lock"
    with (
        held_elsewhere(path),
        pytest.raises(ProviderUnavailable) as caught,
        exclusive_lock(path, timeout=0.05, what="starting the server"),
    ):
        pytest.fail("the lock was taken while held elsewhere")
    assert str(path) in str(caught.value)
    assert "starting the server" in str(caught.value)


async def test_the_async_lock_waits_without_blocking_the_loop(tmp_path: Path) -> None:
    """While it waits, other tasks run; it takes the lock once the holder lets go."""
    path = tmp_path / "server.lock"
    entered = asyncio.Event()
    with held_elsewhere(path):

        async def waiter() -> None:
            async with exclusive_lock_async(path, timeout=30, what="stopping"):
                entered.set()
                assert locked_by_someone(path)

        task = asyncio.ensure_future(waiter())
        for _ in range(20):
            await asyncio.sleep(0)  # the loop keeps turning while the waiter polls
        assert not entered.is_set()
    await asyncio.wait_for(task, 30)
    assert entered.is_set()
    assert not locked_by_someone(path)


async def test_the_async_lock_times_out_too(tmp_path: Path) -> None:
    """The same error for a coroutine."""
    path = tmp_path / "server.lock"
    with held_elsewhere(path), pytest.raises(ProviderUnavailable):
        async with exclusive_lock_async(path, timeout=0.05, what="stopping"):
            pytest.fail("the lock was taken while held elsewhere")
