"""The kit's streamed JSON array reader: items as they arrive, bounded, strict about the shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable

import pytest

from mango.provider import ProtocolError
from mango.provider.jsonstream import json_array_items

DOCUMENT = {
    "before": {"x": [1, 2]},
    "entries": [{"path": "/a", "size": "12"}, {"path": "/ü"}],
    "n": 5,
}


async def _chunks(pieces: Iterable[bytes], read: list[int] | None = None) -> AsyncIterator[bytes]:
    for piece in pieces:
        if read is not None:
            read.append(len(piece))
        yield piece


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[index : index + size] for index in range(0, len(data), size)]


async def _items(pieces: Iterable[bytes], **kwargs: object) -> list[object]:
    return [item async for item in json_array_items(_chunks(pieces), operation="list", **kwargs)]  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
async def test_items_of_a_keyed_array_whatever_the_chunking(size: int) -> None:
    """Every split of the body (a multi-byte character and a number cut too) gives the items."""
    body = json.dumps(DOCUMENT, ensure_ascii=False).encode()
    assert await _items(_split(body, size), key="entries") == DOCUMENT["entries"]


async def test_a_top_level_array_and_the_empty_answers() -> None:
    """``[...]``, ``[]``, ``null``, ``{}`` and ``{"entries": null}`` as proto3 JSON sends them."""
    assert await _items([b' [ 10 , {"a": 1}, "s" ] ']) == [10, {"a": 1}, "s"]
    assert await _items([b"[]"]) == []
    assert await _items([b"null"]) == []
    assert await _items([b"{}"], key="entries") == []
    assert await _items([b'{"other": 1}'], key="entries") == []
    assert await _items([b'{"entries": null}'], key="entries") == []


async def test_stopping_early_reads_no_further() -> None:
    """A caller that stops after its items leaves the rest of the body unread."""
    read: list[int] = []
    pieces = [b'{"entries": [{"i": 0},', b' {"i": 1},', b' {"i": 2}', b"]}"]
    items = json_array_items(_chunks(pieces, read), operation="list", key="entries")
    assert await anext(items) == {"i": 0}
    assert len(read) == 1
    await items.aclose()


@pytest.mark.parametrize(
    "body",
    [
        b'{"entries": [{"a": 1}',
        b'{"entries": [{"a": 1}, ',
        b"[1 2]",
        b'{"entries": {}}',
        b"\xff[]",
        b'"x"',
    ],
)
async def test_malformed_or_cut_bodies_are_protocol_errors(body: bytes) -> None:
    """A cut, malformed or wrongly shaped body is a ProtocolError, never a raw ValueError."""
    key = "entries" if body.startswith(b"{") else None
    with pytest.raises(ProtocolError):
        await _items(_split(body, 3), key=key)


async def test_one_item_past_the_bound_is_refused() -> None:
    """An item longer than ``max_item_bytes`` is refused before it is held whole."""
    body = b'[{"a": "' + b"x" * 5000 + b'"}]'
    with pytest.raises(ProtocolError, match="longer than 1024"):
        await _items(_split(body, 100), max_item_bytes=1024)
    assert await _items(_split(body, 100), max_item_bytes=8192) == [{"a": "x" * 5000}]
