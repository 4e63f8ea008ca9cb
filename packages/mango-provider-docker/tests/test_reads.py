"""Bounded reads and streamed downloads through the archive API, and the tar stream parser."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import AsyncIterator

import pytest

from mango.domain.errors import FileTooLarge, PathEscapeError, PermanentError, ProviderUnavailable
from mango.provider import DEFAULT_MAX_READ_BYTES
from mango_provider_docker import DockerSandbox
from mango_provider_docker.files import TarMemberReader

from .helpers import sh

GIB = 1024 * 1024 * 1024


def archive(member: tarfile.TarInfo, data: bytes, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A one-member tar as the Engine would send it (then the end blocks)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return buffer.getvalue()


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    """``data`` in chunks of ``size`` bytes."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def parse(data: bytes, chunk: int = 7) -> tuple[tarfile.TarInfo, bytes]:
    """The member and body a :class:`TarMemberReader` finds in ``data``."""
    reader = TarMemberReader(pieces(data, chunk), "f")
    info, size = await reader.open_member()
    body = b"".join([part async for part in reader.body(size)])
    assert len(body) == size
    return info, body


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("chunk", [1, 7, 512, 100_000])
async def test_tar_reader_reads_one_member_in_any_chunking(fmt: int, chunk: int) -> None:
    """Headers and body are found whatever the chunk boundaries and the tar dialect."""
    member = tarfile.TarInfo("dir/" + "n" * 120 if fmt != tarfile.USTAR_FORMAT else "f.bin")
    data = bytes(range(256)) * 40 + b"tail"
    member.size = len(data)
    info, body = await parse(archive(member, data, fmt), chunk)
    assert (info.isreg(), body) == (True, data)


async def test_tar_reader_takes_the_size_from_a_pax_record() -> None:
    """A PAX ``size`` record (Go writes one for files of 8 GiB and more) wins over the header."""
    member = tarfile.TarInfo("f.bin")
    member.size = 5
    member.pax_headers = {"size": "5", "comment": "x" * 600}
    _, body = await parse(archive(member, b"hello"))
    assert body == b"hello"
    raw = bytearray(archive(member, b"hello"))
    # Rewrite the PAX record to claim 3 bytes: the reader must trust the record.
    records = raw[512 : 512 + 1024]
    patched = records.replace(b"9 size=5\n", b"9 size=3\n")
    assert patched != records
    raw[512 : 512 + 1024] = patched
    # (the header checksum covers the ustar block only, which is unchanged)
    _, body = await parse(bytes(raw))
    assert body == b"hel"


async def test_tar_reader_reports_links_and_truncation() -> None:
    """A symlink member is returned as such; a stream that ends early is ProviderUnavailable."""
    link = tarfile.TarInfo("l")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    info, _ = await parse(archive(link, b""))
    assert info.issym()
    member = tarfile.TarInfo("f")
    member.size = 4000
    whole = archive(member, b"z" * 4000)
    with pytest.raises(ProviderUnavailable, match="ended inside the file"):
        await parse(whole[:2000])
    with pytest.raises(ProviderUnavailable, match="holds no member"):
        await parse(b"\0" * 1024)
    with pytest.raises(ProviderUnavailable, match="ended early"):
        await parse(whole[:100])


@pytest.mark.docker
async def test_an_8gib_sparse_file_fails_before_any_transfer(sandbox: DockerSandbox) -> None:
    """The default bound refuses an 8 GiB sparse file by the archive stat's size, at once."""
    made = await sandbox.exec(sh("dd if=/dev/null of=huge.bin bs=1 count=0 seek=8589934592"))
    assert made.exit_code == 0, made.stderr
    started = time.monotonic()
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("huge.bin")
    assert (caught.value.size, caught.value.limit) == (8 * GIB, DEFAULT_MAX_READ_BYTES)
    assert time.monotonic() - started < 5.0


@pytest.mark.docker
async def test_open_file_streams_past_8gib_headers_and_can_stop(sandbox: DockerSandbox) -> None:
    """A file of 8 GiB + 1 needs a PAX size record; its first chunks arrive and the rest is left."""
    size = 8 * GIB + 1
    made = await sandbox.exec(sh(f"dd if=/dev/null of=huge.bin bs=1 count=0 seek={size}"))
    assert made.exit_code == 0, made.stderr
    taken = 0
    started = time.monotonic()
    async with sandbox.open_file("huge.bin") as chunks:
        async for chunk in chunks:
            assert chunk == bytes(len(chunk))
            taken += len(chunk)
            if taken >= 4 * 1024 * 1024:
                break
    assert taken >= 4 * 1024 * 1024
    assert time.monotonic() - started < 10.0
    after = await sandbox.exec(sh("printf usable"))
    assert after.stdout == b"usable"


@pytest.mark.docker
async def test_streamed_and_buffered_reads_agree(sandbox: DockerSandbox) -> None:
    """open_file yields read_file's bytes; errors are raised on entry."""
    data = bytes(range(256)) * 5000
    await sandbox.write_file("d/data.bin", data)
    async with sandbox.open_file("d/data.bin") as chunks:
        streamed = b"".join([chunk async for chunk in chunks])
    assert streamed == data == await sandbox.read_file("d/data.bin", max_bytes=len(data))
    with pytest.raises(FileTooLarge):
        await sandbox.read_file("d/data.bin", max_bytes=len(data) - 1)
    await sandbox.exec(sh("ln -s /etc/passwd link"))
    for path, error in [
        ("link", PathEscapeError),
        ("d", PermanentError),
        ("no", FileNotFoundError),
    ]:
        with pytest.raises(error):
            async with sandbox.open_file(path):
                pytest.fail("entered")
