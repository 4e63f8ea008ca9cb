"""Read checks: ``read_file`` is bounded at the source, ``open_file`` streams any size.

A buffered read must check the size before it moves a byte (a sparse file of
any size costs a sandbox nothing), raise :class:`FileTooLarge` with ``size``
and ``limit`` past the bound, and return the file exactly at the bound. The
streamed form yields the same bytes in chunks, refuses the same paths on
entry, and can be left early without harm to the sandbox.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import hashlib
import time

import pytest

from mango.provider import (
    FileTooLarge,
    InvalidInput,
    PathEscapeError,
    PermanentError,
    Sandbox,
)
from mango_conformance.checks import assert_same_bytes, mark_checks
from mango_conformance.harness import Harness

__all__ = ["SPARSE_SIZE", "ReadChecks", "read_stream"]

SPARSE_SIZE = 64 * 1024 * 1024
"""Size of the sparse file the bound checks read (it costs the sandbox no disk)."""

MAKE_SPARSE = 'dd if=/dev/null of="$1" bs=1 count=0 seek="$2" 2>/dev/null && test -f "$1"'
"""``sh -c MAKE_SPARSE sh PATH SIZE``: a sparse file of SIZE bytes (busybox dd is enough)."""


def _pattern(size: int) -> bytes:
    """Deterministic bytes with no repeat at any chunk size a provider might use."""
    count = -(-size // 32)
    return b"".join(hashlib.sha256(n.to_bytes(8, "big")).digest() for n in range(count))[:size]


async def read_stream(sandbox: Sandbox, path: str, *, first_only: bool = False) -> list[bytes]:
    """The chunks ``open_file(path)`` yields (only the first with ``first_only``)."""
    chunks: list[bytes] = []
    async with sandbox.open_file(path) as stream:
        async for chunk in stream:
            chunks.append(chunk)
            if first_only:
                break
    return chunks


class ReadChecks:
    """``read_file``'s bound and ``open_file``'s stream, clauses of the Sandbox port."""

    def _sparse(self, conformance: Harness, sandbox: Sandbox, path: str, size: int) -> None:
        made = conformance.sh(sandbox, MAKE_SPARSE, path, str(size))
        assert made.exit_code == 0, f"could not make a sparse file: {made.stderr[:200]!r}"

    def test_read_bound_is_checked_before_reading(self, conformance: Harness) -> None:
        """A sparse file past the bound fails at once with its full size, not after a read."""
        sandbox = conformance.create()
        self._sparse(conformance, sandbox, "sparse.bin", SPARSE_SIZE)
        started = time.monotonic()
        with pytest.raises(FileTooLarge) as caught:
            conformance.run(sandbox.read_file("sparse.bin", max_bytes=4096), "bounded read")
        elapsed = time.monotonic() - started
        assert (caught.value.size, caught.value.limit) == (SPARSE_SIZE, 4096), (
            "FileTooLarge must carry the file's size (checked first) and the bound"
        )
        assert elapsed < conformance.options.prompt_seconds, f"took {elapsed:.1f}s"

    def test_read_at_and_past_the_bound(self, conformance: Harness) -> None:
        """A file of exactly the bound is returned whole; one byte more is FileTooLarge."""
        sandbox = conformance.create()
        data = _pattern(10_000)
        conformance.run(sandbox.write_file("exact.bin", data))
        exact = conformance.run(sandbox.read_file("exact.bin", max_bytes=len(data)))
        assert_same_bytes(exact, data, "read_file at the bound")
        with pytest.raises(FileTooLarge) as caught:
            conformance.run(sandbox.read_file("exact.bin", max_bytes=len(data) - 1))
        assert (caught.value.size, caught.value.limit) == (len(data), len(data) - 1)
        for bad in (0, -1):
            with pytest.raises(InvalidInput):
                conformance.run(sandbox.read_file("exact.bin", max_bytes=bad))

    def test_open_file_streams_the_exact_bytes(self, conformance: Harness) -> None:
        """open_file yields the file's bytes in non-empty chunks, larger than any read bound."""
        sandbox = conformance.create()
        data = _pattern(3 * 1024 * 1024 + 17)
        conformance.run(sandbox.write_file("big/stream.bin", data))
        chunks = conformance.run(read_stream(sandbox, "big/stream.bin"), "open_file")
        assert all(chunks), "open_file yielded an empty chunk"
        assert_same_bytes(b"".join(chunks), data, "open_file's chunks")
        with pytest.raises(FileTooLarge):
            conformance.run(sandbox.read_file("big/stream.bin", max_bytes=1024 * 1024))
        conformance.run(sandbox.write_file("empty.bin", b""))
        assert conformance.run(read_stream(sandbox, "empty.bin")) == []

    def test_open_file_can_be_left_early(self, conformance: Harness) -> None:
        """Leaving a stream of a large sparse file after one chunk is prompt; the sandbox works."""
        sandbox = conformance.create()
        self._sparse(conformance, sandbox, "sparse.bin", SPARSE_SIZE)
        started = time.monotonic()
        first = conformance.run(read_stream(sandbox, "sparse.bin", first_only=True))
        elapsed = time.monotonic() - started
        assert len(first) == 1
        assert first[0] == bytes(len(first[0])), "a sparse file reads as zeros"
        assert elapsed < conformance.options.prompt_seconds, f"took {elapsed:.1f}s"
        after = conformance.sh(sandbox, "printf still-usable")
        assert (after.exit_code, after.stdout) == (0, b"still-usable")

    def test_open_file_refuses_what_read_file_refuses(self, conformance: Harness) -> None:
        """Missing files, directories, symlinks and escapes fail on entering open_file."""
        sandbox = conformance.create()
        made = conformance.sh(sandbox, "mkdir -p adir && ln -s /etc/passwd link")
        assert made.exit_code == 0, made.stderr[:200]
        cases: list[tuple[str, type[BaseException]]] = [
            ("missing.txt", FileNotFoundError),
            ("adir", PermanentError),
            ("link", PathEscapeError),
            ("../escape", PathEscapeError),
        ]
        for path, error in cases:
            with pytest.raises(error):
                conformance.run(read_stream(sandbox, path), f"open_file({path!r})")


mark_checks(ReadChecks, pytest.mark.mango_gap)
