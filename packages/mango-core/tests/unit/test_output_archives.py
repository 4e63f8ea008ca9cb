"""The streaming tar reader and the output rules, on archives written by ``tarfile``."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import AsyncIterator, Callable

import pytest

from mango.domain.archives import EntryType, TarReader
from mango.domain.errors import OutputRejected, ProviderUnavailable
from mango.domain.outputs import read_outputs


def archive(build: Callable[[tarfile.TarFile], None], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        build(tar)
    return buffer.getvalue()


def add(
    tar: tarfile.TarFile,
    name: str,
    data: bytes = b"",
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


async def chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def collect(data: bytes, size: int = 7, **limits: int) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    async for item in read_outputs(chunks(data, size), **limits):
        found[item.path] = b"".join([piece async for piece in item.body])
    return found


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("size", [1, 511, 512, 4096])
def test_every_format_reads_back_whatever_the_chunking(fmt: int, size: int) -> None:
    """Headers, long names (GNU and PAX), bodies and padding come out right in any chunks."""
    long_name = "deep/" + "n" * 120 + "/file.bin"

    def build(tar: tarfile.TarFile) -> None:
        add(tar, ".", kind=tarfile.DIRTYPE)
        add(tar, "./a.txt", b"alpha")
        add(tar, "deep", kind=tarfile.DIRTYPE)
        add(tar, long_name if fmt != tarfile.USTAR_FORMAT else "deep/short.bin", b"\0" * 1500)
        add(tar, "empty", b"")

    found = run(collect(archive(build, fmt), size))
    assert found == {
        "a.txt": b"alpha",
        (long_name if fmt != tarfile.USTAR_FORMAT else "deep/short.bin"): b"\0" * 1500,
        "empty": b"",
    }


def test_unread_bodies_are_skipped() -> None:
    """A caller that reads no body still gets every header in order."""

    async def names(data: bytes) -> list[tuple[str, EntryType, int]]:
        reader = TarReader(chunks(data, 100), "test archive")
        seen = []
        while (entry := await reader.next()) is not None:
            seen.append((entry.name, entry.type, entry.size))
        return seen

    data = archive(
        lambda tar: (add(tar, "x", b"1" * 2000), add(tar, "l", kind=tarfile.SYMTYPE, link="x"))
    )
    assert run(names(data)) == [("x", EntryType.REGULAR, 2000), ("l", EntryType.SYMLINK, 0)]


@pytest.mark.parametrize(
    ("kind", "link", "what"),
    [
        (tarfile.SYMTYPE, "/etc/passwd", "symlink"),
        (tarfile.LNKTYPE, "a.txt", "hardlink"),
        (tarfile.FIFOTYPE, "", "FIFO"),
        (tarfile.CHRTYPE, "", "character device"),
        (tarfile.BLKTYPE, "", "block device"),
    ],
)
def test_anything_but_files_and_directories_fails_naming_the_entry(
    kind: bytes, link: str, what: str
) -> None:
    """A link, device or FIFO fails the whole archive, with its name and type."""
    data = archive(lambda tar: (add(tar, "a.txt", b"a"), add(tar, "sub/odd", kind=kind, link=link)))
    with pytest.raises(OutputRejected, match=what) as raised:
        run(collect(data))
    assert raised.value.path == "sub/odd"


def test_duplicates_counts_and_sizes_are_refused() -> None:
    """A name twice, one file too many, one byte too large: each named."""
    twice = archive(lambda tar: (add(tar, "./same", b"1"), add(tar, "same", b"2")))
    with pytest.raises(OutputRejected, match="twice"):
        run(collect(twice))
    many = archive(lambda tar: [add(tar, f"f{i}", b"x") for i in range(4)])
    with pytest.raises(OutputRejected, match=r"one file more than the 3") as raised:
        run(collect(many, max_files=3))
    assert raised.value.path == "f3"
    assert run(collect(many, max_files=4)).keys() == {"f0", "f1", "f2", "f3"}
    large = archive(lambda tar: add(tar, "big", b"x" * 11))
    with pytest.raises(OutputRejected, match="11 bytes, more than the 10"):
        run(collect(large, max_file_bytes=10))


def test_a_huge_declared_size_is_refused_before_its_body_is_read() -> None:
    """The size check comes from the header: a 501 MiB entry is refused with no body at all."""

    info = tarfile.TarInfo("sparse.bin")
    info.size = 501 * 1024 * 1024
    # The member header alone, nothing after (tarfile's addfile refuses to write a
    # header without its body since Python 3.13).
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    with pytest.raises(OutputRejected, match=r"sparse\.bin"):
        run(collect(header))


def test_a_cut_or_garbled_archive_is_a_retryable_provider_failure() -> None:
    """An archive that ends inside a body, or is not tar, is ProviderUnavailable."""
    data = archive(lambda tar: add(tar, "a", b"z" * 5000))
    with pytest.raises(ProviderUnavailable, match="ended"):
        run(collect(data[:2000]))
    with pytest.raises(ProviderUnavailable, match="not a readable tar"):
        run(collect(b"this is not a tar archive".ljust(512, b"!")))


def test_a_pax_path_with_invalid_utf8_is_rejected_printably() -> None:
    """Non-UTF-8 bytes in a name (as GNU tar writes them) are refused, the path shown escaped."""

    def build(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("bad-\udcff-name")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))

    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT, errors="surrogateescape"
    ) as tar:
        build(tar)
    with pytest.raises(OutputRejected, match="UTF-8") as raised:
        run(collect(buffer.getvalue()))
    assert "\\udcff" in (raised.value.path or "")


def test_bodies_stream_in_the_chunks_received() -> None:
    """No body chunk is larger than what the stream delivered: memory stays O(chunk)."""
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def sizes() -> tuple[list[int], str]:
        data = archive(lambda tar: add(tar, "big", payload))
        seen: list[int] = []
        digest = hashlib.sha256()
        async for item in read_outputs(chunks(data, 64 * 1024)):
            async for piece in item.body:
                seen.append(len(piece))
                digest.update(piece)
        return seen, digest.hexdigest()

    seen, digest = run(sizes())  # type: ignore[misc]
    assert max(seen) <= 64 * 1024
    assert digest == hashlib.sha256(payload).hexdigest()
