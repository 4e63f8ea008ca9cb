"""Exact command output over execd's line-based event stream.

execd runs a command with ``bash -c`` (``sh`` without bash), writes its
stdout and stderr to files and tails them: every *line* becomes one
``stdout``/``stderr`` event whose ``text`` has the terminator stripped (``\\n``,
``\\r`` and ``\\r\\n`` alike; an empty line arrives as ``"\\n"``), and the text
is a JSON string, so bytes that are not UTF-8 are replaced. Concatenating the
texts loses every newline and any binary byte (the reference adapter did
exactly that).

mango therefore never sends the command line as it is. :func:`wrap` runs it
inside a POSIX shell wrapper that pipes the command's stdout and stderr each
through an encoder: every ``read(2)`` of at most 64 KiB becomes one line of
base64. A line of base64 survives execd's line splitting and JSON text
unchanged, a chunk is delivered as soon as the command wrote it, and
:class:`FrameDecoder` turns each event back into the exact bytes. The
wrapper exits with the command's own status (captured through a file
descriptor, so the encoders never change it), which execd reports in its
``error`` event. It needs ``dd``, ``base64`` and ``tr`` in the image (busybox
and coreutils both have them); a line that is not base64 (an image without
them prints an error) is passed through as text with its newline, so the
failure is visible rather than silent.

:func:`sse_events` parses the response: standard SSE (``data: {json}``
blocks) or execd's bare ``{json}`` frames separated by blank lines.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from mango.provider import OutputStream, ProtocolError
from mango.provider.http import RemoteUnavailable

__all__ = [
    "MAX_FRAME_CHARS",
    "WRAPPER_OVERHEAD",
    "ExecEnd",
    "FrameDecoder",
    "bounded_lines",
    "exit_code_of",
    "sse_events",
    "wrap",
]

MAX_FRAME_CHARS = 8 * 1024 * 1024
"""Largest event the client accepts; an encoded chunk is about 88 KiB."""

# Each pass reads what one read(2) returns (at most 64 KiB, a pipe's size), so
# output is forwarded as soon as it is written; `tr` joins base64's wrapped
# lines into one per chunk (busybox base64 has no -w0).
_ENCODER = (
    "mango_enc() { while mango_c=$(dd bs=65536 count=1 2>/dev/null | base64 | tr -d '\\n')"
    ' && [ -n "$mango_c" ]; do printf \'%s\\n\' "$mango_c"; done; }'
)


def wrap(line: str) -> str:
    """The execd command for the shell ``line``: its output base64-framed, its status kept.

    fd 6 and 7 keep the real stdout and stderr; inside the command
    substitution fd 5 carries the command's exit status out, fd 8 the stdout
    pipe past the stderr encoder. The command itself sees only 0, 1 and 2.
    """
    return (
        f"{_ENCODER}\n"
        "exec 6>&1 7>&2\n"
        "mango_s=$( { { { (\n"
        f"{line}\n"
        ") 5>&- 6>&- 7>&-; printf '%s' \"$?\" >&5; } 2>&1 1>&8 8>&- | mango_enc 8>&- >&7; }"
        " 8>&1 | mango_enc >&6; } 5>&1 )\n"
        'exit "${mango_s:-1}"'
    )


WRAPPER_OVERHEAD = len(wrap("").encode())
"""Bytes the wrapper adds to a command line (the line must stay one shell argument)."""


class FrameDecoder:
    """Turns the ``text`` of one stdout/stderr event back into the bytes the command wrote."""

    __slots__ = ()

    @staticmethod
    def decode(text: str) -> bytes:
        """The chunk a frame carries; a frame that is not base64 is raw text plus its newline."""
        frame = text.strip()
        if not frame:
            return b""
        try:
            return base64.b64decode(frame, validate=True)
        except (binascii.Error, ValueError):
            # Not from the encoder: the wrapper's own diagnostics (a missing
            # tool). Keep them readable; the line's terminator was stripped.
            return text.encode("utf-8", "replace") + b"\n"


class ExecEnd:
    """The terminal event types of a command's stream."""

    ERROR = "error"
    COMPLETE = "execution_complete"


STREAMS = {"stdout": OutputStream.STDOUT, "stderr": OutputStream.STDERR}
"""Event type -> output stream."""


def exit_code_of(event: dict[str, Any]) -> int | None:
    """The exit code an ``error`` event reports (``error.evalue``, or flat ``evalue``).

    ``None`` if the value is not a number: execd could not start the shell at all.
    """
    error = event.get("error")
    value = error.get("evalue") if isinstance(error, dict) else event.get("evalue")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


async def bounded_lines(
    chunks: AsyncIterable[bytes], limit: int = MAX_FRAME_CHARS
) -> AsyncIterator[str]:
    """The lines of a byte stream (``\\n`` or ``\\r\\n``), none longer than ``limit`` bytes.

    httpx's ``aiter_lines`` buffers a line until its end arrives, however
    long: a server that never sends a newline would fill the worker's memory.
    Past ``limit`` bytes without one this raises :class:`ProtocolError`.
    """
    buffer = bytearray()
    async for chunk in chunks:
        start = len(buffer)
        buffer += chunk
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            start = 0
            yield line.removesuffix(b"\r").decode("utf-8", "replace")
        if len(buffer) > limit:
            raise ProtocolError(f"execd sent a line longer than {limit} bytes")
    if buffer:
        yield bytes(buffer).removesuffix(b"\r").decode("utf-8", "replace")


async def sse_events(lines: AsyncIterable[str]) -> AsyncIterator[dict[str, Any]]:
    """Parse an execd event stream (SSE ``data:`` blocks or bare JSON frames) into objects.

    Comment lines (``:``) and SSE fields other than ``data`` are ignored; a
    block ends at a blank line (or at the end of the stream). A block that is
    not a JSON object raises :class:`RemoteUnavailable`.
    """
    data: list[str] = []
    size = 0

    def flush() -> dict[str, Any] | None:
        nonlocal size
        if not data:
            return None
        text = "\n".join(data)
        data.clear()
        size = 0
        try:
            value = json.loads(text)
        except ValueError:
            raise RemoteUnavailable(
                f"execd sent an event that is not JSON: {text[:120]!r}"
            ) from None
        if not isinstance(value, dict):
            raise RemoteUnavailable(f"execd sent an event that is not an object: {text[:120]!r}")
        return value

    async for raw in lines:
        line = raw
        if not line.strip():
            event = flush()
            if event is not None:
                yield event
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if sep and field in ("data", "event", "id", "retry"):
            if field != "data":
                continue
            line = value[1:] if value.startswith(" ") else value
        size += len(line)
        if size > MAX_FRAME_CHARS:
            raise RemoteUnavailable(f"execd sent an event longer than {MAX_FRAME_CHARS} characters")
        data.append(line)
    event = flush()
    if event is not None:
        yield event
