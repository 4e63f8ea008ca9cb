"""The items of a JSON array read as its bytes arrive: memory O(item), whatever the array.

A daemon's listing comes as one JSON document (``[{...}, ...]``, or an
object holding the array under one key, as Connect's ``{"entries": [...]}``)
with no bound of its own. :func:`json_array_items` yields its items one by
one from the body's chunks, so the caller can stop after the items it wants
and never holds the rest: past ``max_item_bytes`` of one unfinished item, a
body that is not such a document, or one that ends early, is a
:class:`~mango.domain.errors.ProtocolError`.

Stdlib only.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator
from typing import Any

from mango.domain.errors import ProtocolError

__all__ = ["MAX_ITEM_BYTES", "json_array_items"]

MAX_ITEM_BYTES = 1 << 20
"""The default bound of one item (and of the text between items)."""
_WHITESPACE = " \t\r\n"


class _Reader:
    """A text buffer over the chunks, consumed from the front."""

    def __init__(self, chunks: AsyncIterator[bytes], *, operation: str, limit: int) -> None:
        self._chunks = chunks
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._operation = operation
        self._limit = limit
        self.text = ""
        self.pos = 0
        self.eof = False

    def fail(self, why: str) -> ProtocolError:
        return ProtocolError(f"{self._operation}: the answer is not the JSON expected: {why}")

    async def more(self) -> bool:
        """Read the next chunk into the buffer; False at the end of the body."""
        if self.eof:
            return False
        if self.pos:
            self.text, self.pos = self.text[self.pos :], 0
        if len(self.text) > self._limit:
            raise self.fail(f"one item is longer than {self._limit} bytes")
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self.eof = True
            try:
                self.text += self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                raise self.fail("the body is not UTF-8") from None
            return False
        try:
            self.text += self._decoder.decode(chunk)
        except UnicodeDecodeError:
            raise self.fail("the body is not UTF-8") from None
        return True

    async def peek(self) -> str:
        """The next character that is not white space ('' at the end of the body)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not await self.more():
                return ""

    async def expect(self, chars: str) -> str:
        char = await self.peek()
        if not char or char not in chars:
            raise self.fail(f"expected one of {chars!r}, got {char or 'the end'!r}")
        self.pos += 1
        return char

    async def value(self) -> Any:
        """The next complete JSON value (it must be followed by something, or the end)."""
        decoder = json.JSONDecoder()
        await self.peek()
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                value, end = None, -1
            # A number at the end of the buffer may go on in the next chunk.
            if end != -1 and (end < len(self.text) or self.eof):
                self.pos = end
                return value
            if not await self.more():
                if end != -1:
                    self.pos = end
                    return value
                raise self.fail("the body ends inside a value")


async def json_array_items(
    chunks: AsyncIterator[bytes],
    *,
    operation: str,
    key: str | None = None,
    max_item_bytes: int = MAX_ITEM_BYTES,
) -> AsyncIterator[Any]:
    """The items of the JSON array in ``chunks`` (with ``key``: of the object's ``key``).

    An object without ``key`` (``{}``: proto3 JSON leaves an empty list out),
    and ``null`` for the top-level array, have no items. What follows the
    array is not read: a caller that stops early closes the body.
    """
    reader = _Reader(chunks, operation=operation, limit=max_item_bytes)
    if key is not None:
        await reader.expect("{")
        while True:
            if await reader.peek() == "}":
                return
            name = await reader.value()
            if not isinstance(name, str):
                raise reader.fail("an object key is not a string")
            await reader.expect(":")
            if name == key:
                break
            await reader.value()  # another field: skipped
            if await reader.expect(",}") == "}":
                return
    if await reader.peek() == "n":
        if await reader.value() is None:
            return
        raise reader.fail("expected an array")
    await reader.expect("[")
    if await reader.peek() == "]":
        return
    while True:
        yield await reader.value()
        if await reader.expect(",]") == "]":
            return
