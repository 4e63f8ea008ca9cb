"""Files in a Docker sandbox through the archive API: round trips, modes, escapes."""

from __future__ import annotations

import pytest

from mango.domain.errors import InvalidPathError, PathEscapeError, PermanentError
from mango_provider_docker import DockerSandbox

from .helpers import sh

pytestmark = pytest.mark.docker

PAYLOAD = b"binary\x00\xff\xfe\n" * 1000


async def test_round_trip_creates_parents_with_fixed_modes(sandbox: DockerSandbox) -> None:
    """A nested write reads back byte for byte; new parents are 0755, the file 0644."""
    await sandbox.write_file("a/b/c/data.bin", PAYLOAD)
    assert await sandbox.read_file("a/b/c/data.bin") == PAYLOAD
    assert await sandbox.read_file("./a//b/c/data.bin") == PAYLOAD
    modes = await sandbox.exec(sh("stat -c '%a %u %n' a a/b a/b/c a/b/c/data.bin"))
    assert modes.stdout.decode().splitlines() == [
        "755 0 a",
        "755 0 a/b",
        "755 0 a/b/c",
        "644 0 a/b/c/data.bin",
    ]
    seen = await sandbox.exec(sh("cat /workspace/a/b/c/data.bin"))
    assert seen.stdout == PAYLOAD


async def test_existing_parents_keep_their_modes(sandbox: DockerSandbox) -> None:
    """Writing into an existing directory does not reset its mode."""
    await sandbox.exec(sh("mkdir -p private && chmod 700 private"))
    await sandbox.write_file("private/f.txt", b"x")
    modes = await sandbox.exec(sh("stat -c %a private"))
    assert modes.stdout == b"700\n"


async def test_overwrite_truncates_and_empty_files_work(sandbox: DockerSandbox) -> None:
    """A shorter write replaces a longer file; an empty file reads back empty."""
    await sandbox.write_file("over.bin", b"0123456789" * 1000)
    await sandbox.write_file("over.bin", b"abc")
    assert await sandbox.read_file("over.bin") == b"abc"
    await sandbox.write_file("over.bin", b"")
    assert await sandbox.read_file("over.bin") == b""


async def test_missing_files_are_file_not_found(sandbox: DockerSandbox) -> None:
    """A missing file, or one below a missing directory, is FileNotFoundError."""
    for path in ("missing.bin", "no/such/dir/missing.bin"):
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file(path)


async def test_non_regular_files_are_permanent_errors(sandbox: DockerSandbox) -> None:
    """Directories and FIFOs cannot be read; a directory cannot be overwritten by a file."""
    await sandbox.exec(sh("mkdir -p d/e && mkfifo pipe && : > plain"))
    for path in ("d", "pipe"):
        with pytest.raises(PermanentError) as caught:
            await sandbox.read_file(path)
        assert not isinstance(caught.value, PathEscapeError)
    with pytest.raises(PermanentError):
        await sandbox.write_file("d", b"x")
    with pytest.raises(PermanentError):
        await sandbox.write_file("plain/below", b"x")
    listing = await sandbox.exec(sh("test -d d/e && test -p pipe && test -f plain"))
    assert listing.exit_code == 0


async def test_lexical_escapes_are_rejected_before_any_io(sandbox: DockerSandbox) -> None:
    """``..``, absolute paths and malformed names never reach the daemon."""
    for path in ("../escape", "/etc/passwd", "a/../../escape", "/workspace/x"):
        with pytest.raises(PathEscapeError):
            await sandbox.read_file(path)
        with pytest.raises(PathEscapeError):
            await sandbox.write_file(path, b"x")
    with pytest.raises(InvalidPathError):
        await sandbox.write_file("bad\x00name", b"x")
    assert (await sandbox.exec(sh("test ! -e /escape"))).exit_code == 0


async def test_symlinks_planted_by_a_command_are_never_followed(sandbox: DockerSandbox) -> None:
    """Links in a parent or as the target, pointing out or in, raise PathEscapeError."""
    planted = await sandbox.exec(
        sh(
            "mkdir -p real && ln -s .. up && ln -s /etc etc && ln -s real inner "
            "&& ln -s /etc/passwd pw"
        )
    )
    assert planted.exit_code == 0
    for path in ("pw", "etc/passwd", "up/workspace/real", "inner/x"):
        with pytest.raises(PathEscapeError):
            await sandbox.read_file(path)
    for path in ("pw", "up/escaped", "etc/escaped", "inner/x", "up/new/dir/escaped"):
        with pytest.raises(PathEscapeError):
            await sandbox.write_file(path, b"escaped")
    check = await sandbox.exec(
        sh("test ! -e /escaped && test ! -e /etc/escaped && test ! -e /new && test ! -e real/x")
    )
    assert check.exit_code == 0
    assert (await sandbox.exec(sh("cat /etc/passwd"))).stdout.startswith(b"root:")


async def test_a_replaced_workspace_root_is_refused(sandbox: DockerSandbox) -> None:
    """If a command swaps /workspace for a symlink, file access refuses to follow it."""
    swapped = await sandbox.exec(sh("cd / && rm -rf /workspace && ln -s /etc /workspace"))
    assert swapped.exit_code == 0
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("passwd")
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("escaped", b"x")
    with pytest.raises(PermanentError):
        await sandbox.exec(sh("true"))
