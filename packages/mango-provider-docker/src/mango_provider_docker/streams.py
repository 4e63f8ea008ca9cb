"""Reading and writing one exec's attach stream.

The stream multiplexes stdout and stderr (no TTY). :class:`OutputPump`
reads it to its end: first the wrapper's status line on stdout (see
:mod:`mango_provider_docker.scripts`), then the command's output into the
exec's :class:`~mango.provider.output.ExecChannel`, which keeps an exact
prefix of at most the cap per stream and drops the rest as it arrives. The
pump waits while the channel's queue is full (a slow streaming consumer), and
aiodocker's queue pauses the socket when a few frames are pending, so memory
stays O(cap).
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiodocker.stream import Stream

from mango.provider import OutputStream
from mango.provider.output import ExecChannel
from mango_provider_docker.engine import Engine
from mango_provider_docker.scripts import STATUS_ERROR, STATUS_PID

__all__ = ["MAX_FAILURE_TEXT", "STDIN_CHUNK", "OutputPump", "close_write_side", "write_stdin"]

STDIN_CHUNK = 64 * 1024
"""Stdin is written in pieces of this size, so a cancellation is noticed between them."""
MAX_FAILURE_TEXT = 4096
"""How much of what the runtime prints instead of starting the wrapper is kept for the error."""
_MAX_STATUS = 64


class OutputPump:
    """Reads the attach stream to its end: the wrapper's status line, then capped output.

    Until the status line arrives nothing reaches the channel: if the wrapper
    never starts, whatever the stream carries is the daemon's or the runtime's
    complaint (``argument list too long``, ``exceed maximum message size``),
    not the command's output. Then :attr:`started` stays False and
    :attr:`failure` holds that text. Stderr can overtake the status line (the
    daemon copies the two pipes independently), so it is held back until the
    status line comes, up to :data:`MAX_FAILURE_TEXT` bytes: more than that is
    no complaint but the command's own output, and is passed on.
    """

    def __init__(self, engine: Engine, stream: Stream, channel: ExecChannel) -> None:
        self._engine = engine
        self._stream = stream
        self._channel = channel
        self.pid: int | None = None
        self.error: str | None = None
        self.status_seen = asyncio.Event()
        self._head = bytearray()
        self._held = bytearray()
        self._pass_stderr = False
        self.failure = bytearray()
        """What arrived instead of the status line (at most :data:`MAX_FAILURE_TEXT` bytes)."""
        self.frames = 0
        """How many frames have been read: whether output still arrives."""

    @property
    def started(self) -> bool:
        """The wrapper ran and reported the command's pid."""
        return self.pid is not None

    def _keep_failure(self, chunk: bytes) -> None:
        room = MAX_FAILURE_TEXT - len(self.failure)
        if room > 0:
            self.failure += chunk[:room]

    def _split_status(self, chunk: bytes) -> bytes:
        """Consume the status line from the head of stdout; return the command's own bytes."""
        self._head += chunk
        newline = self._head.find(b"\n", 0, _MAX_STATUS)
        if newline < 0:
            if len(self._head) >= _MAX_STATUS:
                self._give_up_status()
            return b""
        line = bytes(self._head[:newline])
        rest = bytes(self._head[newline + 1 :])
        if line.startswith(STATUS_PID) and line[len(STATUS_PID) :].isdigit():
            self.pid = int(line[len(STATUS_PID) :])
        elif line.startswith(STATUS_ERROR):
            self.error = line[len(STATUS_ERROR) :].decode("ascii", "replace")
        else:
            # Not our wrapper speaking: the runtime could not even start it.
            self._give_up_status()
            return b""
        self._head.clear()
        self.status_seen.set()
        return rest

    def _give_up_status(self) -> None:
        """No status line will come: what arrived so far is the reason the wrapper never ran."""
        self._keep_failure(bytes(self._head) + bytes(self._held))
        self._head.clear()
        self._held.clear()
        self.status_seen.set()

    async def _release_stderr(self) -> None:
        """Pass held-back stderr on; from now on stderr is the command's own."""
        self._pass_stderr = True
        if self._held:
            held = bytes(self._held)
            self._held.clear()
            await self._channel.send(OutputStream.STDERR, held)

    async def _before_status(self, stream: OutputStream, data: bytes) -> None:
        """One frame that arrived while the status line is still awaited."""
        if stream is OutputStream.STDOUT:
            rest = self._split_status(data)
            if self.started:
                await self._release_stderr()
                await self._channel.send(OutputStream.STDOUT, rest)
        elif self._pass_stderr:
            await self._channel.send(OutputStream.STDERR, data)
        else:
            self._held += data
            if len(self._held) > MAX_FAILURE_TEXT:
                await self._release_stderr()

    async def run(self) -> None:
        """Read until end of stream."""
        try:
            with self._engine.errors("read command output"):
                while (message := await self._stream.read_out()) is not None:
                    self.frames += 1
                    stream = OutputStream.STDERR if message.stream == 2 else OutputStream.STDOUT
                    if not self.status_seen.is_set():
                        await self._before_status(stream, message.data)
                    elif self.started:
                        await self._channel.send(stream, message.data)
                    else:
                        self._keep_failure(message.data)
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
