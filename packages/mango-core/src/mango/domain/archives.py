"""A tar stream read as it arrives: headers parsed one by one, bodies streamed.

:class:`TarReader` walks an archive delivered as chunks (a provider's export
of a directory, for instance) without ever holding more than one chunk and
one header: :meth:`TarReader.next` returns the next entry's header (PAX
extended headers and GNU long names applied, a PAX ``size`` winning over the
header's, base-256 sizes understood by :mod:`tarfile`'s header parser) and
:meth:`TarReader.body` streams that entry's bytes; a body left unread is
skipped by the next call. Entry types are reported as they are, never
resolved: a symlink stays a symlink, a hardlink a hardlink.

An archive that is not tar, or ends inside an entry, is
:class:`~mango.domain.errors.ProviderUnavailable`: the archive came from a
backend, and a cut transfer is worth retrying.
"""

from __future__ import annotations

import enum
import tarfile
from collections.abc import AsyncGenerator, AsyncIterator

import attrs

from mango.domain.errors import ProviderUnavailable

__all__ = ["ArchiveEntry", "EntryType", "TarReader"]

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_MAX_EXTENDED = 1024 * 1024
"""Largest PAX header or GNU long name accepted (real ones are a few hundred bytes)."""


class EntryType(enum.Enum):
    """What an archive entry is, as its header says."""

    REGULAR = "regular file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"
    CHARACTER_DEVICE = "character device"
    BLOCK_DEVICE = "block device"
    FIFO = "FIFO"
    OTHER = "special entry"


_TYPES = {
    tarfile.REGTYPE: EntryType.REGULAR,
    tarfile.AREGTYPE: EntryType.REGULAR,
    tarfile.DIRTYPE: EntryType.DIRECTORY,
    tarfile.SYMTYPE: EntryType.SYMLINK,
    tarfile.LNKTYPE: EntryType.HARDLINK,
    tarfile.CHRTYPE: EntryType.CHARACTER_DEVICE,
    tarfile.BLKTYPE: EntryType.BLOCK_DEVICE,
    tarfile.FIFOTYPE: EntryType.FIFO,
}
# Entries whose size field counts data blocks that follow the header (tarfile's rule).
_WITHOUT_DATA = {
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.CHRTYPE,
    tarfile.BLKTYPE,
    tarfile.FIFOTYPE,
}


@attrs.frozen
class ArchiveEntry:
    """One entry's header: its name (undecodable bytes as surrogate escapes), type and size."""

    name: str
    type: EntryType
    size: int
    linkname: str = ""


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _pax_records(data: bytes) -> dict[str, str]:
    """The records of a PAX extended header (``"%d %s=%s\\n"`` each)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        length_text, space, _ = data[position : position + 20].partition(b" ")
        if not space or not length_text.isdigit() or int(length_text) <= len(length_text) + 1:
            raise ValueError("malformed extended header")
        record = data[position : position + int(length_text)]
        keyword, equals, value = record[len(length_text) + 1 :].partition(b"=")
        if not equals or not record.endswith(b"\n"):
            raise ValueError("malformed extended header record")
        records[keyword.decode("utf-8", "surrogateescape")] = value[:-1].decode(
            "utf-8", "surrogateescape"
        )
        position += int(length_text)
    return records


class TarReader:
    """Reads a tar archive from ``chunks``; ``what`` names it in messages."""

    def __init__(self, chunks: AsyncIterator[bytes], what: str) -> None:
        self._chunks = chunks
        self._what = what
        self._pending = bytearray()
        self._remaining = 0
        self._padding = 0
        self._ended = False

    def _malformed(self, reason: str) -> ProviderUnavailable:
        return ProviderUnavailable(f"{self._what} is not a readable tar archive: {reason}")

    async def _more(self) -> bool:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            return False
        self._pending += chunk
        return True

    async def _take(self, size: int) -> bytes:
        while len(self._pending) < size:
            if not await self._more():
                raise self._malformed("it ended early")
        taken = bytes(self._pending[:size])
        del self._pending[:size]
        return taken

    async def _skip(self, size: int) -> None:
        while size:
            if not self._pending and not await self._more():
                raise self._malformed("it ended inside an entry")
            step = min(size, len(self._pending))
            del self._pending[:step]
            size -= step

    async def _header_block(self) -> bytes | None:
        """The next 512-byte block, or None at a clean end (no byte left)."""
        while len(self._pending) < _BLOCK:
            if not await self._more():
                if not self._pending:
                    return None
                raise self._malformed("it ended inside a header")
        return await self._take(_BLOCK)

    async def _extended(self, size: int) -> bytes:
        if size > _MAX_EXTENDED:
            raise self._malformed("an extended header is too large")
        return (await self._take(_padded(size)))[:size]

    async def next(self) -> ArchiveEntry | None:
        """The next entry's header, or None at the end (the rest of the stream is not read)."""
        if self._ended:
            return None
        await self._skip(self._remaining + self._padding)
        self._remaining = self._padding = 0
        pax: dict[str, str] = {}
        long_name: str | None = None
        long_link: str | None = None
        while True:
            block = await self._header_block()
            if block is None or block == _ZERO_BLOCK:
                self._ended = True
                return None
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as exc:
                raise self._malformed(str(exc) or type(exc).__name__) from exc
            if info.type in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
                try:
                    pax.update(_pax_records(await self._extended(info.size)))
                except ValueError as exc:
                    raise self._malformed(str(exc)) from exc
                continue
            if info.type == tarfile.XGLTYPE:
                await self._extended(info.size)  # global defaults: nothing mango relies on
                continue
            if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                text = (await self._extended(info.size)).rstrip(b"\0")
                decoded = text.decode("utf-8", "surrogateescape")
                if info.type == tarfile.GNUTYPE_LONGNAME:
                    long_name = decoded
                else:
                    long_link = decoded
                continue
            return self._entry(info, pax, long_name, long_link)

    def _entry(
        self,
        info: tarfile.TarInfo,
        pax: dict[str, str],
        long_name: str | None,
        long_link: str | None,
    ) -> ArchiveEntry:
        name = pax.get("path", long_name if long_name is not None else info.name)
        size = info.size
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError as exc:
                raise self._malformed(f"bad size {pax['size']!r}") from exc
        if size < 0:
            raise self._malformed(f"negative size for {name!r}")
        kind = _TYPES.get(info.type, EntryType.OTHER)
        data = 0 if info.type in _WITHOUT_DATA else size
        self._remaining = data
        self._padding = _padded(data) - data
        linkname = pax.get("linkpath", long_link if long_link is not None else info.linkname)
        return ArchiveEntry(name=name, type=kind, size=size, linkname=linkname)

    async def body(self) -> AsyncGenerator[bytes, None]:
        """Yield the current entry's bytes as they arrive (each at most one received chunk).

        A chunk that lies wholly inside the body is handed on as it came, uncopied.
        """
        while self._remaining:
            if self._pending:
                step = min(self._remaining, len(self._pending))
                chunk = bytes(self._pending[:step])
                del self._pending[:step]
            else:
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    raise self._malformed("it ended inside an entry") from None
                if len(chunk) > self._remaining:
                    self._pending += chunk[self._remaining :]
                    chunk = chunk[: self._remaining]
            self._remaining -= len(chunk)
            yield chunk
