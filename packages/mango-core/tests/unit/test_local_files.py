"""Workspace file access on the local provider: confinement, symlinks, errors."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mango.domain.errors import (
    InvalidInput,
    InvalidPathError,
    PathEscapeError,
    PermanentError,
    SandboxNotFound,
)
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider, LocalSandbox


def content(path: Path) -> bytes:
    """The bytes of a host file, read directly."""
    return path.read_bytes()


def listing(directory: str) -> list[str]:
    """The names in a host directory, sorted."""
    return sorted(entry.name for entry in Path(directory).iterdir())


def replace_with_symlink(path: Path, target: Path) -> None:
    """Swap the directory ``path`` for a symlink to ``target``."""
    shutil.rmtree(path)
    path.symlink_to(target)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
async def sandbox(base: Path) -> LocalSandbox:
    return await LocalProvider(base).create("files-session", SandboxSpec())


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the workspace that no file operation may touch."""
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_bytes(b"outside secret")
    return path


async def test_write_then_read(sandbox: LocalSandbox) -> None:
    """Bytes written come back unchanged, and are visible to commands."""
    data = bytes(range(256)) * 10
    await sandbox.write_file("data.bin", data)
    assert await sandbox.read_file("data.bin") == data
    assert (await sandbox.exec(Command(("cat", "data.bin")))).stdout == data


async def test_write_creates_parents_with_modes(sandbox: LocalSandbox) -> None:
    """Missing parents are created; files are 0644 and directories 0755 (umask 022)."""
    old = os.umask(0o022)
    try:
        await sandbox.write_file("a/b/c/file.txt", b"x")
    finally:
        os.umask(old)
    root = Path(sandbox.root)
    assert (root / "a/b/c/file.txt").read_bytes() == b"x"
    assert stat.S_IMODE((root / "a/b/c/file.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((root / "a/b").stat().st_mode) == 0o755


async def test_write_truncates_existing_file(sandbox: LocalSandbox) -> None:
    """Writing a shorter content over a longer file leaves only the new bytes."""
    await sandbox.write_file("f.txt", b"a much longer original content")
    await sandbox.write_file("f.txt", b"short")
    assert await sandbox.read_file("f.txt") == b"short"


async def test_write_accepts_bytearray_and_empty(sandbox: LocalSandbox) -> None:
    """bytearray and empty data are written as given."""
    await sandbox.write_file("ba", bytearray(b"abc"))  # type: ignore[arg-type]
    await sandbox.write_file("empty", b"")
    assert await sandbox.read_file("ba") == b"abc"
    assert await sandbox.read_file("empty") == b""


async def test_paths_are_normalised(sandbox: LocalSandbox) -> None:
    """'.' components and repeated slashes name the same file."""
    await sandbox.write_file("./dir//file", b"1")
    assert await sandbox.read_file("dir/./file") == b"1"


async def test_read_missing_is_file_not_found(sandbox: LocalSandbox) -> None:
    """A missing file, or a missing parent, raises the builtin FileNotFoundError."""
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing.txt")
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing/dir/file.txt")


async def test_read_directory_is_permanent_error(sandbox: LocalSandbox) -> None:
    """Reading a directory raises PermanentError saying so."""
    await sandbox.write_file("dir/file", b"")
    with pytest.raises(PermanentError, match="directory"):
        await sandbox.read_file("dir")


async def test_read_fifo_is_permanent_error_without_blocking(sandbox: LocalSandbox) -> None:
    """A FIFO is not a regular file; reading it must not hang waiting for a writer."""
    await sandbox.exec(Command(("mkfifo", "pipe")))
    with pytest.raises(PermanentError, match="not a regular file"):
        await asyncio.wait_for(sandbox.read_file("pipe"), 30)


async def test_write_over_directory_is_permanent_error(sandbox: LocalSandbox) -> None:
    """Writing where a directory is raises PermanentError."""
    await sandbox.write_file("dir/file", b"")
    with pytest.raises(PermanentError, match="directory"):
        await sandbox.write_file("dir", b"x")


async def test_write_below_a_file_is_permanent_error(sandbox: LocalSandbox) -> None:
    """A parent component that is a regular file cannot hold children."""
    await sandbox.write_file("plain", b"")
    with pytest.raises(PermanentError, match="not a directory"):
        await sandbox.write_file("plain/child", b"x")


@pytest.mark.parametrize("path", ["../escape", "a/../../escape", "/etc/passwd", "a/.."])
async def test_dotdot_and_absolute_refused(sandbox: LocalSandbox, path: str) -> None:
    """'..' anywhere and absolute paths raise PathEscapeError for read and write."""
    with pytest.raises(PathEscapeError):
        await sandbox.read_file(path)
    with pytest.raises(PathEscapeError):
        await sandbox.write_file(path, b"x")


@pytest.mark.parametrize("path", ["", ".", "a\x00b", "a\\b"])
async def test_invalid_paths_refused(sandbox: LocalSandbox, path: str) -> None:
    """The root, NUL and backslashes are invalid workspace file paths."""
    with pytest.raises(InvalidPathError):
        await sandbox.read_file(path)
    with pytest.raises(InvalidPathError):
        await sandbox.write_file(path, b"x")


@pytest.mark.parametrize("raw", [b"caf\xe9.txt", b"dir/\xff\xfe/x"])
async def test_non_utf8_paths_are_invalid_input(sandbox: LocalSandbox, raw: bytes) -> None:
    """A surrogate-escaped name from os.fsdecode is InvalidInput, never a UnicodeEncodeError."""
    path = os.fsdecode(raw)
    with pytest.raises(InvalidInput):
        await sandbox.read_file(path)
    with pytest.raises(InvalidInput):
        await sandbox.write_file(path, b"x")
    assert listing(sandbox.root) == []


async def test_deep_parent_symlink_is_refused(sandbox: LocalSandbox, outside: Path) -> None:
    """A link several components down stops the descriptor walk; nothing is created beyond it."""
    await sandbox.write_file("a/b/keep", b"k")
    await sandbox.exec(Command(("ln", "-s", str(outside.parent), "a/b/out")))
    with pytest.raises(PathEscapeError, match="symlink 'out'"):
        await sandbox.read_file("a/b/out/secret.txt")
    with pytest.raises(PathEscapeError, match="symlink 'out'"):
        await sandbox.write_file("a/b/out/new/file", b"planted")
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt"]


async def test_planted_directory_symlink_is_refused(sandbox: LocalSandbox, outside: Path) -> None:
    """A directory symlink planted by a command is never followed, for read or write."""
    await sandbox.exec(Command(("ln", "-s", str(outside.parent), "leak")))
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("leak/secret.txt")
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("leak/secret.txt", b"overwritten")
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("leak/new/file.txt", b"planted")
    assert content(outside) == b"outside secret"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt"]


async def test_planted_etc_symlink_is_refused(sandbox: LocalSandbox) -> None:
    """``ln -s /etc leak`` cannot be used to read host files."""
    await sandbox.exec(Command(("ln", "-s", "/etc", "leak")))
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("leak/passwd")


async def test_planted_file_symlink_is_refused(sandbox: LocalSandbox, outside: Path) -> None:
    """A symlink as the final component is refused; the target stays untouched."""
    await sandbox.exec(Command(("ln", "-s", str(outside), "link")))
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("link")
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("link", b"overwritten")
    assert content(outside) == b"outside secret"


async def test_symlink_inside_workspace_is_refused_too(sandbox: LocalSandbox) -> None:
    """Even a symlink that stays inside is not followed (no resolution at all)."""
    await sandbox.write_file("real/file", b"x")
    await sandbox.exec(Command(("ln", "-s", "real", "alias")))
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("alias/file")


async def test_dangling_symlink_is_not_created_through(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    """A dangling symlink pointing outside is not used to create its target."""
    target = tmp_path / "would-be-created"
    await sandbox.exec(Command(("ln", "-s", str(target), "dangling")))
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("dangling", b"x")
    assert not target.exists()


async def test_workspace_replaced_by_symlink_is_refused(
    sandbox: LocalSandbox, outside: Path
) -> None:
    """If the workspace root itself became a symlink, file access refuses it."""
    replace_with_symlink(Path(sandbox.root), outside.parent)
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("secret.txt")


async def test_workspace_gone_is_not_found(sandbox: LocalSandbox) -> None:
    """With the workspace deleted behind its back, file access raises SandboxNotFound."""
    shutil.rmtree(sandbox.root)
    with pytest.raises(SandboxNotFound):
        await sandbox.read_file("x")
    with pytest.raises(SandboxNotFound):
        await sandbox.write_file("x", b"1")


async def test_write_rejects_non_bytes(sandbox: LocalSandbox) -> None:
    """Text is not silently encoded."""
    with pytest.raises(PermanentError):
        await sandbox.write_file("t.txt", "text")  # type: ignore[arg-type]


_component = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="/\\\x7f"),
    min_size=1,
    max_size=12,
).filter(lambda part: part not in (".", ".."))


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(_component, min_size=1, max_size=4), data=st.binary(max_size=2048))
def test_round_trip_property(tmp_path: Path, parts: list[str], data: bytes) -> None:
    """Any valid path and content written is read back unchanged."""

    async def scenario() -> bytes:
        sandbox = await LocalProvider(tmp_path / "prop").create("prop", SandboxSpec())
        path = "/".join(parts)
        try:
            await sandbox.write_file(path, data)
        except PermanentError:
            # A generated path may collide with an earlier example's file or directory.
            await sandbox.destroy()
            sandbox = await LocalProvider(tmp_path / "prop").create("prop", SandboxSpec())
            await sandbox.write_file(path, data)
        return await sandbox.read_file(path)

    assert asyncio.run(scenario()) == data
