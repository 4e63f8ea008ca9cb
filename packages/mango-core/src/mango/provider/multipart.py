"""A ``multipart/form-data`` request body built as it is sent, for streamed uploads.

httpx encodes multipart bodies from in-memory values or synchronous files;
a streamed write has neither, only an async iterator of chunks. A vendor
whose upload takes a multipart form (envd before 0.5.7, execd's
``/files/upload``, Daytona's toolbox) gets :func:`multipart_body`: the small
parts first (a path, a JSON metadata document), then the file part whose body
is the chunks as they come, then the closing boundary. Memory stays
O(chunk); the request goes out with chunked transfer encoding, which every
one of those daemons (Go's ``net/http``) reads.

Stdlib only.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence

import attrs

__all__ = ["FormField", "MultipartBody", "multipart_body"]


@attrs.frozen
class FormField:
    """One small part of a form: its ``name``, ``value`` and, for a file part, its file name."""

    name: str
    value: bytes
    filename: str | None = None
    content_type: str | None = None


@attrs.frozen
class MultipartBody:
    """A form ready to send: the ``Content-Type`` header and the body's chunks."""

    content_type: str
    chunks: AsyncIterator[bytes]


def _quoted(value: str) -> str:
    # As browsers and httpx quote a disposition parameter: no raw quote or line break.
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def _head(boundary: str, name: str, filename: str | None, content_type: str | None) -> bytes:
    disposition = f'form-data; name="{_quoted(name)}"'
    if filename is not None:
        disposition += f'; filename="{_quoted(filename)}"'
    lines = [f"--{boundary}", f"Content-Disposition: {disposition}"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def multipart_body(
    fields: Sequence[FormField],
    *,
    file_field: str,
    filename: str,
    chunks: AsyncIterator[bytes],
    content_type: str = "application/octet-stream",
) -> MultipartBody:
    """The form of ``fields`` followed by the file part ``file_field`` holding ``chunks``.

    The boundary is random (32 hex digits): no file can be crafted to end the
    part early, and a value that happened to contain it is improbable beyond
    concern.
    """
    boundary = secrets.token_hex(16)

    async def body() -> AsyncIterator[bytes]:
        for field in fields:
            yield _head(boundary, field.name, field.filename, field.content_type)
            yield field.value + b"\r\n"
        yield _head(boundary, file_field, filename, content_type)
        async for chunk in chunks:
            yield chunk
        yield f"\r\n--{boundary}--\r\n".encode()

    return MultipartBody(f"multipart/form-data; boundary={boundary}", body())
