"""A window of a text file's lines, read from a stream with bounded memory and reach.

The ``read`` tool streams the file (``Sandbox.open_file``) through
:func:`read_line_window` instead of loading it: only the lines of the window
are kept, at most ``cap`` bytes of them, and reading stops as soon as the
answer is known (the window is complete and one more character shows that
lines follow, or the kept text passed the cap) or after ``scan_limit`` bytes
of the file, whichever comes first. Lines are split exactly as
:meth:`str.splitlines` splits them (``\\r\\n`` split across two chunks
included), after UTF-8 decoding with replacement characters.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable

import attrs

__all__ = ["BINARY_SNIFF_BYTES", "LineWindow", "read_line_window"]

BINARY_SNIFF_BYTES = 8192
"""A NUL byte among the first this many bytes makes the file binary."""

# The boundaries str.splitlines recognises; \r\n first so that it is one boundary.
_BOUNDARY = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


@attrs.frozen
class LineWindow:
    """What :func:`read_line_window` found."""

    text: str
    """The window's lines, joined with their line ends (at most ``cap`` bytes plus one line)."""
    more: bool
    """Lines follow the window (only known when a window end was asked for)."""
    binary: bool = False
    """The file has a NUL byte near its start; ``text`` is empty."""
    scanned: int = 0
    """Bytes of the file read."""
    stopped: bool = False
    """Reading stopped at ``scan_limit`` before the answer was complete."""


@attrs.define
class _Window:
    start: int
    end: int | None
    cap: int
    line: int = 0
    kept: list[str] = attrs.field(factory=list)
    kept_bytes: int = 0
    more: bool = False

    @property
    def full(self) -> bool:
        """The kept text already passed the cap: nothing read later can be shown."""
        return self.kept_bytes > self.cap

    def _inside(self) -> bool:
        return self.line >= self.start and (self.end is None or self.line < self.end)

    def _keep(self, piece: str) -> None:
        if piece and self._inside() and not self.full:
            self.kept.append(piece)
            self.kept_bytes += len(piece.encode("utf-8"))

    def feed(self, text: str) -> bool:
        """Take decoded text; False once the answer is complete."""
        position = 0
        for match in _BOUNDARY.finditer(text):
            if self.end is not None and self.line >= self.end:
                self.more = True  # a character after the window's last line
                return False
            self._keep(text[position : match.end()])
            self.line += 1
            position = match.end()
        rest = text[position:]
        if rest and self.end is not None and self.line >= self.end:
            self.more = True
            return False
        self._keep(rest)
        return not self.full


async def read_line_window(
    chunks: AsyncIterable[bytes],
    *,
    start: int,
    end: int | None,
    cap: int,
    scan_limit: int,
) -> LineWindow:
    """Lines ``start`` (0-based) up to ``end`` (exclusive; ``None``: to the end) of a stream.

    Reads at most ``scan_limit`` bytes and keeps at most about ``cap`` bytes
    of text. The caller closes the stream.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    window = _Window(start, end, cap)
    scanned = 0
    held = ""  # a trailing \r waits for the next chunk: it may start a \r\n
    going, stopped = True, False
    async for raw in chunks:
        room = scan_limit - scanned
        chunk = raw[:room]
        if scanned < BINARY_SNIFF_BYTES and b"\0" in chunk[: BINARY_SNIFF_BYTES - scanned]:
            return LineWindow("", False, binary=True, scanned=scanned + len(chunk))
        scanned += len(chunk)
        text = held + decoder.decode(chunk)
        held = "\r" if text.endswith("\r") else ""
        going = window.feed(text[: len(text) - len(held)])
        if not going:
            break
        if len(raw) > room:  # the file goes on past the scan limit
            stopped = True
            break
    if going and not stopped:
        window.feed(held + decoder.decode(b"", final=True))
    return LineWindow("".join(window.kept), window.more, scanned=scanned, stopped=going and stopped)
