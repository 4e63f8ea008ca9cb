"""Files in a Docker sandbox through the archive API: round trips, modes, escapes."""

from __future__ import annotations

import os

import pytest

from mango.domain.errors import (
    InvalidInput,
    InvalidPathError,
    PathEscapeError,
    PermanentError,
    SandboxNotFound,
)
from mango.domain.values import SandboxRef, SandboxSpec
from mango.provider import Entry, EntryKind
from mango_provider_docker import DockerProvider, DockerSandbox, Engine
from mango_provider_docker.files import WORKSPACE_POLICY, container_stat

from .helpers import sh
from .test_mounts import _old_container

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


async def test_a_write_of_anything_but_bytes_is_invalid_input_and_writes_nothing(
    sandbox: DockerSandbox,
) -> None:
    """An int, a string or None is refused before the archive is built: nothing appears."""
    for data in (5, "text", None):
        with pytest.raises(InvalidInput, match="takes bytes"):
            await sandbox.write_file("made/x.bin", data)  # type: ignore[arg-type]
    assert (await sandbox.exec(sh("test ! -e made"))).exit_code == 0


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


async def test_a_replaced_workspace_root_is_refused(
    sandbox: DockerSandbox,
    provider: DockerProvider,
    docker_engine: Engine,
    session_key: str,
    test_image: str,
) -> None:
    """/workspace cannot be swapped where the skills mount pins it; where it can (a container
    older than the mount), file access refuses to follow the symlink."""
    pinned = await sandbox.exec(
        sh("cd / && rm -rf /workspace; test -d /workspace && ! test -L /workspace")
    )
    assert pinned.exit_code == 0, pinned
    made = await _old_container(docker_engine, session_key + "-old", test_image)
    try:
        old = await provider.attach(session_key + "-old", SandboxRef("docker", made), SandboxSpec())
        swapped = await old.exec(sh("cd / && rm -rf /workspace && ln -s /etc /workspace"))
        assert swapped.exit_code == 0
        with pytest.raises(PathEscapeError):
            await old.read_file("passwd")
        with pytest.raises(PathEscapeError):
            await old.write_file("escaped", b"x")
        with pytest.raises(PermanentError):
            await old.exec(sh("true"))
    finally:
        await docker_engine.remove_container(made)


async def test_links_in_deep_parents_are_refused_by_the_policy(sandbox: DockerSandbox) -> None:
    """A link several components down, out or back in, stops reads and writes before transfer."""
    planted = await sandbox.exec(
        sh("mkdir -p a/b && ln -s /etc a/b/out && ln -s ../.. a/b/back && ln -s /nowhere a/b/gone")
    )
    assert planted.exit_code == 0
    for path in ("a/b/out/passwd", "a/b/back/workspace/a/b/out/passwd", "./a//b/out/group"):
        with pytest.raises(PathEscapeError, match="symlink"):
            await sandbox.read_file(path)
    for path in ("a/b/out/made", "a/b/out/new/deeper/made", "a/b/back/made", "a/b/gone/made"):
        with pytest.raises(PathEscapeError, match="symlink"):
            await sandbox.write_file(path, b"escaped")
    check = await sandbox.exec(
        sh("test ! -e /etc/made && test ! -e /etc/new && test ! -e /made && test ! -e /nowhere")
    )
    assert check.exit_code == 0


async def test_the_stat_callback_classifies_container_paths(
    sandbox: DockerSandbox, docker_engine: Engine
) -> None:
    """Directories, files (with size), links, FIFOs and missing paths, as the Engine sees them."""
    made = await sandbox.exec(sh("printf 12345 > f && ln -s f l && mkfifo p && mkdir d"))
    assert made.exit_code == 0
    stat = container_stat(docker_engine, sandbox.container_id)
    assert (await stat("/workspace")).kind is EntryKind.DIRECTORY  # type: ignore[union-attr]
    assert await stat("/workspace/f") == Entry(EntryKind.REGULAR, 5)
    assert (await stat("/workspace/l")).kind is EntryKind.SYMLINK  # type: ignore[union-attr]
    assert (await stat("/workspace/p")).kind is EntryKind.OTHER  # type: ignore[union-attr]
    assert (await stat("/workspace/d")).kind is EntryKind.DIRECTORY  # type: ignore[union-attr]
    assert await stat("/workspace/missing") is None
    resolved = await WORKSPACE_POLICY.resolve_write("d/x/y/file", stat)
    assert resolved.missing_dirs == ("/workspace/d/x", "/workspace/d/x/y")
    assert (await WORKSPACE_POLICY.resolve_read("f", stat)).entry == Entry(EntryKind.REGULAR, 5)


async def test_a_removed_container_is_not_found_through_the_stat(
    provider: DockerProvider, session_key: str, docker_engine: Engine
) -> None:
    """Once the container is gone, resolving any path raises SandboxNotFound."""
    made = await provider.create(session_key, SandboxSpec())
    await made.destroy()
    with pytest.raises(SandboxNotFound):
        await made.read_file("x")
    with pytest.raises(SandboxNotFound):
        await WORKSPACE_POLICY.resolve_write("x", container_stat(docker_engine, made.container_id))


async def test_non_utf8_paths_are_invalid_input(sandbox: DockerSandbox) -> None:
    """A surrogate-escaped name from os.fsdecode is refused as InvalidInput, not a UnicodeError."""
    for raw in (b"caf\xe9.txt", b"dir/\xff/x"):
        with pytest.raises(InvalidInput):
            await sandbox.read_file(os.fsdecode(raw))
        with pytest.raises(InvalidInput):
            await sandbox.write_file(os.fsdecode(raw), b"x")
