"""Files through execd: bounded reads, streamed reads, the path policy over files/info."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mango.provider import (
    Command,
    FileTooLarge,
    InvalidInput,
    PathEscapeError,
    PermanentError,
    SandboxNotFound,
    SandboxSpec,
)
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox

SPEC = SandboxSpec(timeout=60)


async def test_read_is_bounded_and_open_file_streams(
    make_provider: Callable[..., OpenSandboxProvider],
) -> None:
    """read_file refuses past its bound (size checked first); open_file streams any size."""
    sandbox = await make_provider(max_read_bytes=1024).create("files-bound", SPEC)
    big = bytes(range(256)) * 4096 * 3  # 3 MiB
    await sandbox.write_file("big.bin", big)
    with pytest.raises(FileTooLarge) as info:
        await sandbox.read_file("big.bin")
    assert (info.value.size, info.value.limit) == (len(big), 1024)
    assert await sandbox.read_file("big.bin", max_bytes=len(big)) == big
    with pytest.raises(FileTooLarge):
        await sandbox.read_file("big.bin", max_bytes=len(big) - 1)
    sizes: list[int] = []
    async with sandbox.open_file("big.bin") as chunks:
        received = bytearray()
        async for chunk in chunks:
            sizes.append(len(chunk))
            received += chunk
    assert bytes(received) == big
    assert max(sizes) <= 64 * 1024
    assert len(sizes) > 1


async def test_path_policy_over_files_info(
    make_provider: Callable[..., OpenSandboxProvider],
) -> None:
    """Links anywhere are refused, a directory is not a file, a missing file is missing."""
    sandbox = await make_provider().create("files-policy", SPEC)
    await sandbox.exec(Command(("sh", "-c", "mkdir d && ln -s / up && ln -s d dl")))
    for path in ("up/etc/passwd", "dl/x", "up"):
        with pytest.raises(PathEscapeError):
            await sandbox.read_file(path)
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("dl/new.txt", b"no")
    with pytest.raises(PermanentError):
        await sandbox.read_file("d")
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("d/missing")
    await sandbox.write_file("d/e/f.txt", b"nested")
    assert await sandbox.read_file("d/e/f.txt") == b"nested"


async def test_files_of_a_deleted_sandbox_are_not_found(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """A vanished sandbox is SandboxNotFound, never a missing file."""
    sandbox = await make_provider().create("files-gone", SPEC)
    await sandbox.write_file("x", b"1")
    await fake.delete(sandbox.ref.external_id)
    with pytest.raises(SandboxNotFound):
        await sandbox.read_file("x")
    with pytest.raises(SandboxNotFound):
        await sandbox.write_file("y", b"2")
    for call in (sandbox.list_dir(""), sandbox.stat("x"), sandbox.rename("x", "z")):
        with pytest.raises(SandboxNotFound):  # the file API asks the lifecycle API too
            await call


@pytest.mark.parametrize("data", [5, "text", None])
async def test_a_write_of_anything_but_bytes_is_invalid_input_and_sends_nothing(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider], data: object
) -> None:
    """No NUL bytes for an int: a non-bytes value is refused before any request."""
    sandbox = await make_provider().create("files-types", SPEC)
    before = len(fake.faults.log)
    with pytest.raises(InvalidInput, match="takes bytes"):
        await sandbox.write_file("made/x.bin", data)  # type: ignore[arg-type]
    assert len(fake.faults.log) == before
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("made/x.bin")
