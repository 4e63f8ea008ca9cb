"""Beacons: a command in a fake sandbox tells the test that it got somewhere.

A test that must act while a command runs (delete its sandbox, say) needs
to know that the command *is* running. A beacon is a FIFO in the sandbox's
workspace: the command writes a line to it once it reaches that point
(``echo up > started; exec sleep 30``) and :meth:`Beacon.wait` returns the
line as soon as it is written, woken by the event loop (no polling, no
sleep), or raises :class:`TimeoutError` naming the beacon if nothing came.

The test holds the FIFO open for reading *and* writing (Linux allows it on a
FIFO), so the command's ``open`` never blocks and the FIFO never reads as
ended. Create the beacon before starting the command: a command that finds
no FIFO writes a plain file instead.
"""

from __future__ import annotations

import asyncio
import os
import select
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

__all__ = ["Beacon", "open_beacon"]


@attrs.define(eq=False)
class Beacon:
    """One FIFO a command writes to; see the module docstring."""

    path: Path
    """Where the FIFO is on this host."""
    _fd: int = attrs.field(repr=False, alias="_fd")

    async def wait(self, timeout: float) -> bytes:
        """What the command wrote, once it has; :class:`TimeoutError` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not written.done():
                written.set_result(None)

        loop.add_reader(self._fd, readable)
        try:
            async with asyncio.timeout(timeout):
                await written
        except TimeoutError:
            raise TimeoutError(
                f"nothing reached the beacon {self.path.name!r} within {timeout} s"
            ) from None
        finally:
            loop.remove_reader(self._fd)
        return os.read(self._fd, select.PIPE_BUF)


@asynccontextmanager
async def open_beacon(directory: str | Path, name: str) -> AsyncIterator[Beacon]:
    """Make the FIFO ``directory/name`` and hold it open while the block runs.

    :class:`FileExistsError` if the name is taken. The FIFO stays (the
    sandbox's deletion removes it with the workspace).
    """
    path = Path(directory) / name
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        yield Beacon(path, fd)
    finally:
        os.close(fd)
