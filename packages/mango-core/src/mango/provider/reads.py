"""Reads bounded at the source: the one rule every provider's ``read_file`` follows.

``Sandbox.read_file(path, *, max_bytes=None)`` returns the whole file, so it
must never hold more than its bound, whatever the file claims or does while
it is read (a sparse 8 GiB file costs the sandbox nothing; a log may grow
under the reader). Every provider does the same three things:

1. :func:`read_limit` -- the bound: ``max_bytes`` if the caller gave one, else
   the provider's read cap (``MANGO_MAX_READ_BYTES``, :func:`mango.provider.max_read_bytes`);
2. :func:`check_size` -- the file's size, when the backend reports one (``fstat``,
   an archive stat, a files-info call), is checked *before* any byte moves:
   :class:`~mango.provider.FileTooLarge` with ``size`` and ``limit``;
3. :class:`BoundedBuffer` / :func:`collect_bounded` -- the content is read in
   chunks and joined, and the read stops with :class:`FileTooLarge` as soon as
   more than the bound has arrived (``size`` is then the bytes seen so far), so
   memory stays O(bound + one chunk).

``Sandbox.open_file(path)`` is the streamed form for files of any size; a
provider yields chunks as its backend delivers them (``async with
sandbox.open_file(p) as chunks: async for chunk in chunks``).
:class:`ThreadedChunks` makes that iterator from a blocking read (a file
descriptor on the worker host), one chunk in flight at a time.

Stdlib only; local, Docker and every remote provider use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable

from mango.domain.errors import FileTooLarge, InvalidInput

__all__ = [
    "READ_CHUNK_BYTES",
    "BoundedBuffer",
    "ThreadedChunks",
    "check_size",
    "collect_bounded",
    "file_too_large",
    "read_limit",
]

READ_CHUNK_BYTES = 256 * 1024
"""The chunk size the built-in providers read and stream with."""


def read_limit(max_bytes: int | None, default: int) -> int:
    """The bound of one buffered read: ``max_bytes`` if given, else ``default`` (the read cap).

    Raises :class:`InvalidInput` unless ``max_bytes`` is ``None`` or a
    positive integer (``0`` would make every non-empty file "too large", which
    is never what a caller means).
    """
    if max_bytes is None:
        return default
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise InvalidInput(f"max_bytes must be a positive integer or None, got {max_bytes!r}")
    return max_bytes


def file_too_large(path: str, size: int, limit: int) -> FileTooLarge:
    """The :class:`FileTooLarge` for ``path``: one message for every provider."""
    return FileTooLarge(
        f"file {path!r} is larger than the read bound ({size} > {limit} bytes)",
        size=size,
        limit=limit,
        hint="stream it (Sandbox.open_file, 'mango files read'), or raise max_bytes "
        "or MANGO_MAX_READ_BYTES",
    )


def check_size(path: str, size: int | None, limit: int) -> None:
    """Raise :class:`FileTooLarge` if the reported ``size`` exceeds ``limit``; None is unknown."""
    if size is not None and size > limit:
        raise file_too_large(path, size, limit)


class BoundedBuffer:
    """Chunks joined up to a bound: :meth:`add` raises :class:`FileTooLarge` past it.

    For readers that pull chunks themselves (a thread over ``os.read``, a tar
    stream parser). Memory is the bound plus the chunk being added.
    """

    __slots__ = ("_chunks", "_size", "limit", "path")

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def size(self) -> int:
        """Bytes kept so far."""
        return self._size

    @property
    def remaining(self) -> int:
        """How many more bytes fit; read at most ``remaining + 1`` to detect an overflow."""
        return self.limit - self._size

    def add(self, chunk: bytes) -> None:
        """Keep ``chunk``; raise :class:`FileTooLarge` if the total now exceeds the bound."""
        self._size += len(chunk)
        if self._size > self.limit:
            self._chunks.clear()  # the error carries sizes only: let the bytes go now
            raise file_too_large(self.path, self._size, self.limit)
        if chunk:
            self._chunks.append(chunk)

    def getvalue(self) -> bytes:
        """The bytes kept, joined."""
        return b"".join(self._chunks)


async def collect_bounded(chunks: AsyncIterable[bytes], limit: int, *, path: str) -> bytes:
    """Join ``chunks`` (a download, an archive member) up to ``limit`` bytes.

    Raises :class:`FileTooLarge` as soon as more than ``limit`` bytes arrived,
    without reading the rest; the caller closes the transfer.
    """
    buffer = BoundedBuffer(path, limit)
    async for chunk in chunks:
        buffer.add(chunk)
    return buffer.getvalue()


class ThreadedChunks:
    """An async iterator of chunks from a blocking ``read()`` run in a worker thread.

    ``read()`` returns the next chunk, ``b""`` at the end. One read is in
    flight at a time, so memory is one chunk; :meth:`aclose` (call it before
    closing what ``read`` reads from) waits for a read still running in its
    thread, even when the consumer was cancelled mid-read.
    """

    def __init__(self, read: Callable[[], bytes]) -> None:
        self._read = read
        self._pending: asyncio.Future[bytes] | None = None
        self._done = False

    def __aiter__(self) -> ThreadedChunks:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        self._pending = asyncio.get_running_loop().run_in_executor(None, self._read)
        # Shielded: a cancelled consumer must not abandon a read that still runs.
        chunk = await asyncio.shield(self._pending)
        self._pending = None
        if not chunk:
            self._done = True
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """End the iteration and wait for a read in flight; idempotent."""
        self._done = True
        pending, self._pending = self._pending, None
        if pending is not None:
            await asyncio.wait({pending})
            if not pending.cancelled():
                pending.exception()  # retrieved: the consumer has gone
