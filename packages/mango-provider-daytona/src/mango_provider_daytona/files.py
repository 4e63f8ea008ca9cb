"""Files through the Daytona toolbox, under the kit's path policy.

The toolbox's ``/files/info`` follows symlinks (``os.Stat``), so it cannot
tell a link from what it points to. Paths are therefore classified by one
shell call (:func:`~mango_provider_daytona.scripts.classify_line`: ``test -L``,
``-d``, ``-f`` on every component, never following one) and judged by
:class:`~mango.provider.PathPolicy`; then the bytes move through the toolbox's
streamed multipart download and its upload. A command could swap a checked
directory for a link between the two calls; that can only redirect the access
to another place inside the same sandbox.

The download is parsed as it arrives (:class:`MultipartReader`); the kit's
:class:`~mango.provider.files.RemoteFiles` checks the part's length against
a read's bound and collects its chunks up to it: memory stays O(chunk) for
``open_file`` and O(bound) for ``read_file``.

Two daemon generations answer differently (daytonaio/daytona
``apps/daemon/pkg/toolbox/fs/download_files.go``): the newer one sends a
file part with ``Content-Length`` and errors as ``error`` parts holding an
``ErrorResponse`` JSON document (``statusCode`` 404 for a missing file);
before its typed errors (commit 38b634404) a file part has no
``Content-Length`` (the bound is then checked while the body is collected)
and an error part is ``text/plain``, ``file not found or invalid: <path>``
or ``error opening file: ...``. Both are read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

import httpx

from mango.provider import (
    Entry,
    EntryKind,
    PermanentError,
    ProviderUnavailable,
    file_not_found,
)

__all__ = ["KINDS", "MultipartReader", "classified", "file_part"]

KINDS = {
    "l": EntryKind.SYMLINK,
    "d": EntryKind.DIRECTORY,
    "f": EntryKind.REGULAR,
    "o": EntryKind.OTHER,
}
_MAX_HEADER_BYTES = 16 * 1024
_MAX_ERROR_BYTES = 64 * 1024


def classified(kinds: Mapping[str, str]) -> Callable[[str], Awaitable[Entry | None]]:
    """A stat callback answering from one classification (path -> kind letter)."""

    async def stat(path: str) -> Entry | None:
        letter = kinds.get(path, "-")
        return None if letter == "-" else Entry(KINDS[letter])

    return stat


def _boundary(response: httpx.Response) -> bytes:
    content_type = str(response.headers.get("content-type", ""))
    for parameter in content_type.split(";")[1:]:
        key, _, value = parameter.strip().partition("=")
        if key.lower() == "boundary" and value:
            return value.strip('"').encode("latin-1")
    raise ProviderUnavailable(
        f"download file: the toolbox answered {content_type!r}, not multipart"
    )


class MultipartReader:
    """The first part of a streamed ``multipart/form-data`` response, read as it arrives.

    :meth:`open` reads the part's headers; iterating yields its body in
    chunks, stopping at the closing delimiter.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._delimiter = b"\r\n--" + _boundary(response)
        self._buffer = b"\r\n"  # the opening delimiter has no CRLF before it
        self._done = False
        self.name = ""
        self.length: int | None = None

    async def _more(self) -> bool:
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            return False
        self._buffer += chunk
        return True

    async def open(self) -> None:
        """Read up to the end of the first part's headers; set :attr:`name` and :attr:`length`."""
        opening = self._delimiter + b"\r\n"
        while (start := self._buffer.find(opening)) < 0:
            if len(self._buffer) > _MAX_HEADER_BYTES or not await self._more():
                raise ProviderUnavailable("download file: the toolbox answered no file part")
        self._buffer = self._buffer[start + len(opening) :]
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > _MAX_HEADER_BYTES or not await self._more():
                raise ProviderUnavailable("download file: the toolbox answered a broken part")
        headers, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
        for line in headers.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key == "content-disposition":
                for parameter in value.split(";"):
                    name, _, text = parameter.strip().partition("=")
                    if name == "name":
                        self.name = text.strip('"')
            elif key == "content-length" and value.strip().isdigit():
                self.length = int(value.strip())

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._body()

    async def _body(self) -> AsyncIterator[bytes]:
        keep = len(self._delimiter) - 1
        while not self._done:
            end = self._buffer.find(self._delimiter)
            if end >= 0:
                body, self._buffer = self._buffer[:end], b""
                self._done = True
                if body:
                    yield body
                return
            if len(self._buffer) > keep:
                body, self._buffer = self._buffer[:-keep], self._buffer[-keep:]
                yield body
            if not await self._more():
                raise ProviderUnavailable("download file: the transfer ended inside the file")

    async def error(self, path: str) -> Exception:
        """The error an ``error`` part describes (404: :class:`FileNotFoundError`)."""
        payload = b""
        async for chunk in self:
            payload += chunk
            if len(payload) > _MAX_ERROR_BYTES:
                break
        text = payload.decode("utf-8", "replace")
        try:
            document = json.loads(text)
        except ValueError:
            return _text_error(text, path)
        status = document.get("statusCode") if isinstance(document, dict) else None
        if status == 404:
            return file_not_found(path)
        if status in (400, 403):
            return PermanentError(f"the toolbox cannot read {path!r} (HTTP {status})")
        return ProviderUnavailable(f"download file: the toolbox failed on {path!r} ({status})")


def _text_error(text: str, path: str) -> Exception:
    """An older daemon's plain-text error part."""
    shown = "".join(ch if ch.isprintable() else " " for ch in text.strip())[:160]
    if text.startswith("file not found or invalid"):
        # It says so for a directory too; the path was classified a regular file just before.
        return file_not_found(path)
    if text.startswith("error opening file"):
        return PermanentError(f"the toolbox cannot read {path!r}: {shown}")
    return ProviderUnavailable(f"download file: the toolbox failed on {path!r}: {shown}")


@asynccontextmanager
async def file_part(response: httpx.Response, path: str) -> AsyncIterator[MultipartReader]:
    """The file part of a one-path bulk download; raises what an ``error`` part says."""
    reader = MultipartReader(response)
    await reader.open()
    if reader.name != "file":
        raise await reader.error(path)
    yield reader
