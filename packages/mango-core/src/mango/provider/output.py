"""Command output capped at the source, and the channel that streams it.

Every provider reads a command's stdout and stderr and must keep memory
O(cap) whatever the command prints. :class:`ExecChannel` is the one place
that does it: the provider's reader feeds it every chunk it receives; the
channel keeps an exact prefix of at most ``cap`` bytes per stream, drops the
rest (the reader keeps draining, so the command never blocks on a full pipe)
and flags the truncation. The kept part of each chunk is queued as an
:class:`~mango.domain.values.OutputChunk` for the consumer.

The queue is bounded in bytes (``window``): a producer that finds it full
waits (:meth:`ExecChannel.send`) or pauses its reader until there is room
(:meth:`ExecChannel.call_when_room`), so a slow consumer holds back the
command instead of growing memory. Bytes past the cap never enter the queue,
so they are never held back. When the consumer leaves
(:meth:`ExecChannel.abandon`), producers are released and later chunks are
dropped.

:func:`collect` is the consumer that turns the events of one exec back into
the buffered :class:`~mango.domain.values.ExecResult`, so that ``exec`` is the
buffered form of ``exec_stream``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterable, Callable

import attrs

from mango.domain.errors import InvalidInput, PermanentError
from mango.domain.values import ExecEvent, ExecResult, OutputChunk, OutputStream

__all__ = ["DEFAULT_WINDOW_BYTES", "ExecChannel", "collect"]

DEFAULT_WINDOW_BYTES = 1024 * 1024
"""How many output bytes may wait for the consumer before the producer is held back."""


class _Capped:
    """The byte count and truncation flag of one stream under the cap."""

    __slots__ = ("kept", "truncated")

    def __init__(self) -> None:
        self.kept = 0
        self.truncated = False


class ExecChannel:
    """One exec's output: capped per stream, queued for a consumer, then one final result.

    Producer side: :meth:`feed` / :meth:`send` for every chunk read,
    :meth:`result` to build the final flags, :meth:`finish` or :meth:`fail`
    once. Consumer side: async iteration yields the queued
    :class:`OutputChunk` values, then the final :class:`ExecResult` (or raises
    what :meth:`fail` was given), then stops.
    """

    def __init__(self, cap: int, *, window: int = DEFAULT_WINDOW_BYTES) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise InvalidInput(f"the output cap must be a non-negative integer, got {cap!r}")
        if window <= 0:
            raise InvalidInput(f"the channel window must be positive, got {window!r}")
        self.cap = cap
        self.window = window
        self._streams = {OutputStream.STDOUT: _Capped(), OutputStream.STDERR: _Capped()}
        self._queue: collections.deque[OutputChunk] = collections.deque()
        self._queued = 0
        self._end: ExecResult | BaseException | None = None
        self._delivered = False
        self._abandoned = False
        self._unbounded = False
        self._wakeup: asyncio.Future[None] | None = None
        self._room_callbacks: list[Callable[[], None]] = []

    # ---------------------------------------------------------------- producer

    @property
    def queued_bytes(self) -> int:
        """Bytes queued for the consumer right now (bounded by about ``window`` + one chunk)."""
        return self._queued

    @property
    def has_room(self) -> bool:
        """True if the producer may feed more now (the queue is below its window)."""
        return self._queued < self.window or self._abandoned or self._unbounded

    @property
    def abandoned(self) -> bool:
        """True once the consumer has left; fed chunks are then dropped."""
        return self._abandoned

    def truncated(self, stream: OutputStream) -> bool:
        """True if bytes of ``stream`` were dropped at the cap."""
        return self._streams[stream].truncated

    def feed(self, stream: OutputStream, data: bytes) -> None:
        """Keep what of ``data`` fits under the cap of ``stream``; flag and drop the rest.

        Never waits: a callback-driven producer checks :attr:`has_room`
        afterwards and pauses its reader until :meth:`call_when_room` fires.
        """
        capped = self._streams[stream]
        room = self.cap - capped.kept
        if len(data) > room:
            capped.truncated = True
            data = data[:room]
        if not data:
            return
        capped.kept += len(data)
        if self._abandoned or self._end is not None:
            return
        self._queue.append(OutputChunk(stream, bytes(data)))
        self._queued += len(data)
        self._wake()

    async def send(self, stream: OutputStream, data: bytes) -> None:
        """Wait until the queue has room, then :meth:`feed` ``data`` (for async producers)."""
        if not self.has_room and len(data) and self._streams[stream].kept < self.cap:
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def release() -> None:
                if not room.done():
                    room.set_result(None)

            self.call_when_room(release)
            await room
        self.feed(stream, data)

    def call_when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the queue has room again (at once if it has now)."""
        if self.has_room:
            callback()
        else:
            self._room_callbacks.append(callback)

    def result(
        self, *, exit_code: int, timed_out: bool = False, cancelled: bool = False
    ) -> ExecResult:
        """The final :class:`ExecResult` (no output bytes) with this channel's truncation flags."""
        return ExecResult(
            exit_code=exit_code,
            timed_out=timed_out,
            cancelled=cancelled,
            stdout_truncated=self._streams[OutputStream.STDOUT].truncated,
            stderr_truncated=self._streams[OutputStream.STDERR].truncated,
        )

    def finish(self, result: ExecResult) -> None:
        """Deliver the final result after the queued chunks; later calls are ignored."""
        if self._end is None:
            self._end = result
            self._wake()

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error`` (raised to the consumer after the queued chunks)."""
        if self._end is None:
            self._end = error
            self._wake()

    def release_window(self) -> None:
        """Stop holding producers back; what is left is queued up to the cap.

        For a command being killed (timeout, cancellation): its remaining
        output is read now instead of being lost in a full pipe, and memory
        stays O(cap).
        """
        self._unbounded = True
        self._release()

    # ---------------------------------------------------------------- consumer

    def abandon(self) -> None:
        """The consumer has left: release waiting producers and drop whatever comes later."""
        self._abandoned = True
        self._queue.clear()
        self._queued = 0
        self._release()

    def __aiter__(self) -> ExecChannel:
        return self

    async def __anext__(self) -> ExecEvent:
        """The next queued chunk, else the final result once it is there; then stop."""
        while True:
            if self._queue:
                chunk = self._queue.popleft()
                self._queued -= len(chunk.data)
                if self._room_callbacks and self.has_room:
                    self._release()
                return chunk
            if self._delivered:
                raise StopAsyncIteration
            end = self._end
            if isinstance(end, ExecResult):
                self._delivered = True
                return end
            if end is not None:
                self._delivered = True
                raise end
            self._wakeup = asyncio.get_running_loop().create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _release(self) -> None:
        callbacks, self._room_callbacks = self._room_callbacks, []
        for callback in callbacks:
            callback()


async def collect(events: AsyncIterable[ExecEvent]) -> ExecResult:
    """Consume one exec's events and return the buffered :class:`ExecResult`.

    The chunks of each stream are joined in order; the flags and exit code
    come from the final result. Raises :class:`InvalidInput` if the stream
    ends without a result (a provider bug).
    """
    stdout = bytearray()
    stderr = bytearray()
    async for event in events:
        if isinstance(event, OutputChunk):
            (stdout if event.stream is OutputStream.STDOUT else stderr).extend(event.data)
        else:
            return attrs.evolve(event, stdout=bytes(stdout), stderr=bytes(stderr))
    raise PermanentError("the exec stream ended without a result")
