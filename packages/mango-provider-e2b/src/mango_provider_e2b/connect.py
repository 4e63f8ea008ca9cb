"""The Connect protocol's streaming envelope (JSON codec), for envd's server streams.

A Connect stream body is a sequence of envelopes: one flags byte, a 4-byte
big-endian payload length, then the payload (here UTF-8 JSON). Flag ``0x02``
marks the end-of-stream envelope, whose JSON is ``{}`` or
``{"error": {"code": ..., "message": ...}}``; flag ``0x01`` (compressed) is
refused, as it is never negotiated (``Connect-Content-Encoding: identity``).

Both the provider (decoding what envd sends) and the fake (encoding it) use
this module, so the framing is written once. The decoder is incremental and
holds at most one envelope: memory stays bounded by :data:`MAX_ENVELOPE_BYTES`
whatever the stream carries in total.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import attrs

from mango.provider.http import RemoteUnavailable

__all__ = [
    "COMPRESSED",
    "CONNECT_CONTENT_TYPE",
    "END_STREAM",
    "MAX_ENVELOPE_BYTES",
    "ConnectError",
    "Envelope",
    "decode_envelopes",
    "encode_envelope",
    "end_stream",
]

CONNECT_CONTENT_TYPE = "application/connect+json"
"""Content type of a Connect streaming request or response with the JSON codec."""
COMPRESSED = 0x01
END_STREAM = 0x02
MAX_ENVELOPE_BYTES = 64 * 1024 * 1024
"""Largest envelope accepted (the Connect clients' own limit)."""
_HEADER = struct.Struct(">BI")


@attrs.frozen
class ConnectError:
    """An error a Connect peer reported: its code (``not_found``, ``unavailable``, ...) and text."""

    code: str
    message: str = ""

    @classmethod
    def from_json(cls, value: object) -> ConnectError | None:
        """Read ``{"code": ..., "message": ...}``; ``None`` if ``value`` is not such an object."""
        if not isinstance(value, dict):
            return None
        code = value.get("code")
        message = value.get("message")
        return cls(
            code=code if isinstance(code, str) else "unknown",
            message=message if isinstance(message, str) else "",
        )


@attrs.frozen
class Envelope:
    """One decoded envelope: its flags and its JSON payload."""

    flags: int
    payload: dict[str, Any]

    @property
    def end(self) -> bool:
        """True for the end-of-stream envelope."""
        return bool(self.flags & END_STREAM)

    @property
    def error(self) -> ConnectError | None:
        """The error an end-of-stream envelope carries, if any."""
        return ConnectError.from_json(self.payload.get("error")) if self.end else None


def encode_envelope(payload: dict[str, Any], *, flags: int = 0) -> bytes:
    """One envelope with ``payload`` as compact JSON."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _HEADER.pack(flags, len(body)) + body


def end_stream(error: ConnectError | None = None) -> bytes:
    """The end-of-stream envelope: ``{}``, or the error."""
    payload: dict[str, Any] = {}
    if error is not None:
        payload["error"] = {"code": error.code, "message": error.message}
    return encode_envelope(payload, flags=END_STREAM)


def _protocol_error(what: str) -> RemoteUnavailable:
    return RemoteUnavailable(f"envd stream: {what} (not a Connect JSON stream)")


def _decode(flags: int, body: bytes) -> Envelope:
    if flags & ~(COMPRESSED | END_STREAM):
        raise _protocol_error(f"unknown envelope flags {flags:#04x}")
    if flags & COMPRESSED:
        raise _protocol_error("a compressed envelope arrived though none was negotiated")
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        raise _protocol_error("an envelope is not JSON") from None
    if not isinstance(payload, dict):
        raise _protocol_error("an envelope is not a JSON object")
    return Envelope(flags, payload)


async def decode_envelopes(chunks: AsyncIterable[bytes]) -> AsyncIterator[Envelope]:
    """Yield the envelopes of a byte stream as they complete.

    Raises :class:`RemoteUnavailable` for a malformed or oversized envelope and
    for a stream that ends inside one.
    """
    buffer = bytearray()
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= _HEADER.size:
            flags, length = _HEADER.unpack_from(buffer)
            if length > MAX_ENVELOPE_BYTES:
                raise _protocol_error(f"an envelope of {length} bytes is over the limit")
            end = _HEADER.size + length
            if len(buffer) < end:
                break
            envelope = _decode(flags, bytes(buffer[_HEADER.size : end]))
            del buffer[:end]
            yield envelope
    if buffer:
        raise _protocol_error(f"the stream ended inside an envelope ({len(buffer)} bytes left)")
