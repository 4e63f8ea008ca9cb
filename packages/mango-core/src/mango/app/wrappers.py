"""A delegating sandbox, the base for decorators (fault injection, renaming, mutants)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs

from mango.domain.errors import InvalidInput
from mango.domain.ports import Sandbox
from mango.domain.values import Command, ExecEvent, ExecResult, SandboxRef

__all__ = ["SandboxWrapper", "stream_into"]


async def stream_into(sandbox: Sandbox, path: str, chunks: AsyncIterable[bytes]) -> None:
    """``sandbox.write_stream(path, chunks)``, or for a sandbox from before it, a buffered write.

    A provider plugin written before ``write_stream`` joined the port keeps
    working: its sandbox gets the chunks joined and written with
    ``write_file``, which holds the whole file in memory as every write did
    then (every built-in provider streams).
    """
    streamed = getattr(sandbox, "write_stream", None)
    if streamed is not None:
        await streamed(path, chunks)
        return
    parts: list[bytes] = []
    async for chunk in chunks:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise InvalidInput(f"write_stream() takes chunks of bytes, got {type(chunk).__name__}")
        parts.append(bytes(chunk))
    await sandbox.write_file(path, b"".join(parts))


@attrs.define
class SandboxWrapper:
    """Delegates every :class:`~mango.domain.ports.Sandbox` operation to ``inner``.

    Subclass it and override one method to decorate a sandbox. Attributes it
    does not define (the optional capability operations) are looked up on
    ``inner``, so capability checks see what the wrapped sandbox offers.
    """

    inner: Sandbox

    @property
    def ref(self) -> SandboxRef:
        """The wrapped sandbox's reference."""
        return self.inner.ref

    @property
    def root(self) -> str:
        """The wrapped sandbox's workspace root."""
        return self.inner.root

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command`` in the wrapped sandbox."""
        return await self.inner.exec(command)

    def exec_stream(
        self, command: Command
    ) -> AbstractAsyncContextManager[AsyncIterator[ExecEvent]]:
        """Stream ``command``'s output from the wrapped sandbox."""
        return self.inner.exec_stream(command)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read from the wrapped sandbox (bounded by ``max_bytes``, else its read cap)."""
        return await self.inner.read_file(path, max_bytes=max_bytes)

    def open_file(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream a file from the wrapped sandbox."""
        return self.inner.open_file(path)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write to the wrapped sandbox."""
        await self.inner.write_file(path, data)

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Stream a file into the wrapped sandbox (see :func:`stream_into`)."""
        await stream_into(self.inner, path, chunks)

    async def destroy(self) -> None:
        """Destroy the wrapped sandbox."""
        await self.inner.destroy()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (during construction): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
