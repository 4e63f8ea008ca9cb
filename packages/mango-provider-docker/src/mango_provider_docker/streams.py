"""Reading and writing one exec's attach stream.

The stream multiplexes stdout and stderr (no TTY). :class:`OutputPump`
reads it to its end: first the wrapper's status line on stdout (see
:mod:`mango_provider_docker.scripts`), then the command's output into two
:class:`CappedBuffer` objects that keep an exact prefix of at most ``cap``
bytes and drop the rest as it arrives. aiodocker's queue pauses the socket
when a few frames are pending, so memory stays O(cap).
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiodocker.stream import Stream

from mango_provider_docker.engine import Engine
from mango_provider_docker.scripts import STATUS_ERROR, STATUS_PID

__all__ = ["STDIN_CHUNK", "CappedBuffer", "OutputPump", "close_write_side", "write_stdin"]

STDIN_CHUNK = 64 * 1024
"""Stdin is written in pieces of this size, so a cancellation is noticed between them."""
_MAX_STATUS = 64


class CappedBuffer:
    """The first ``cap`` bytes of one stream; the rest is counted out and dropped."""

    __slots__ = ("cap", "data", "truncated")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the cap; flag the rest as dropped."""
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk


class OutputPump:
    """Reads the attach stream to its end: the wrapper's status line, then capped output."""

    def __init__(self, engine: Engine, stream: Stream, cap: int) -> None:
        self._engine = engine
        self._stream = stream
        self.stdout = CappedBuffer(cap)
        self.stderr = CappedBuffer(cap)
        self.pid: int | None = None
        self.error: str | None = None
        self.status_seen = asyncio.Event()
        self._head = bytearray()

    def _feed_stdout(self, chunk: bytes) -> None:
        if self.status_seen.is_set():
            self.stdout.feed(chunk)
            return
        self._head += chunk
        newline = self._head.find(b"\n", 0, _MAX_STATUS)
        if newline < 0:
            if len(self._head) >= _MAX_STATUS:
                self._give_up_status()
            return
        line = bytes(self._head[:newline])
        rest = bytes(self._head[newline + 1 :])
        self._head.clear()
        if line.startswith(STATUS_PID) and line[len(STATUS_PID) :].isdigit():
            self.pid = int(line[len(STATUS_PID) :])
        elif line.startswith(STATUS_ERROR):
            self.error = line[len(STATUS_ERROR) :].decode("ascii", "replace")
        else:
            # Not our wrapper speaking (the shell could not even start it).
            self._head += line + b"\n"
            self._give_up_status()
            self.stdout.feed(rest)
            return
        self.status_seen.set()
        self.stdout.feed(rest)

    def _give_up_status(self) -> None:
        self.status_seen.set()
        self.stdout.feed(bytes(self._head))
        self._head.clear()

    async def run(self) -> None:
        """Read until end of stream."""
        try:
            with self._engine.errors("read command output"):
                while (message := await self._stream.read_out()) is not None:
                    if message.stream == 2:
                        self.stderr.feed(message.data)
                    else:
                        self._feed_stdout(message.data)
        finally:
            if not self.status_seen.is_set():
                self._give_up_status()


def close_write_side(stream: Stream) -> None:
    """Half-close the hijacked connection so the command reads end-of-file on stdin.

    aiodocker's ``Stream.close()`` closes both directions, so this reaches the
    transport of the upgraded connection directly.
    """
    response = stream._resp  # private: aiodocker has no public half-close
    connection = response.connection if response is not None else None
    transport = connection.transport if connection is not None else None
    if transport is not None and transport.can_write_eof():
        transport.write_eof()


async def write_stdin(stream: Stream, data: bytes) -> None:
    """Write ``data`` to the command's stdin, then half-close the connection.

    A command that exits or closes stdin before reading everything is fine:
    the rest is dropped.
    """
    view = memoryview(data)
    try:
        for start in range(0, len(view), STDIN_CHUNK):
            await stream.write_in(bytes(view[start : start + STDIN_CHUNK]))
        close_write_side(stream)
    except (OSError, RuntimeError, aiohttp.ClientError):
        # The command exited or closed stdin; the rest is not wanted.
        return
