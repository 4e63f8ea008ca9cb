"""The resource mounts on a real daemon: read-only uploads, one outputs directory, old ones."""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.domain.errors import (
    ContentMismatch,
    OwnershipError,
    PathEscapeError,
    PermanentError,
    SandboxNotFound,
)
from mango.domain.resources import FileResourceMount
from mango.domain.skills import SkillMount
from mango.domain.values import SandboxRef, SandboxSpec
from mango.provider import (
    FileResourceSandbox,
    ResourceLockSandbox,
    SessionOutputSandbox,
    SkillBundleSandbox,
)
from mango_provider_docker import DockerProvider, DockerSandbox, Engine
from mango_provider_docker.mounts import MountState

from .conftest import OWNERSHIP, RUN_LABELS
from .helpers import sh

pytestmark = pytest.mark.docker

FIRST = "res-" + "1" * 32
SECOND = "res-" + "2" * 32
PATH = "/mnt/session/uploads/nested/data.txt"


def mount(data: bytes, identity: str = FIRST, path: str = PATH) -> FileResourceMount:
    return FileResourceMount(identity, path, len(data), hashlib.sha256(data).hexdigest())


async def stream(*parts: bytes, fail: bool = False) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if fail:
        raise OSError("the source broke off")


def try_flock(path: Path, mode: int) -> bool:
    """Whether another open file description of ``path`` gets the lock ``mode`` right now."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def export(sandbox: DockerSandbox) -> dict[str, tuple[bytes, bytes]]:
    """The outputs archive: ``{name: (type, content)}``."""
    async with sandbox.resource_lock(), sandbox.open_session_outputs() as chunks:
        data = b"".join([chunk async for chunk in chunks])
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {
            member.name: (
                member.type,
                archive.extractfile(member).read() if member.isreg() else b"",  # type: ignore[union-attr]
            )
            for member in archive.getmembers()
        }


async def test_a_new_sandbox_implements_the_resource_protocols(sandbox: DockerSandbox) -> None:
    """Every container made today has the three mounts, and its sandbox the four protocols."""
    assert isinstance(sandbox, FileResourceSandbox)
    assert isinstance(sandbox, SessionOutputSandbox)
    assert isinstance(sandbox, SkillBundleSandbox)
    assert isinstance(sandbox, ResourceLockSandbox)
    assert sandbox.mounts == MountState()
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in sandbox.host_dir.iterdir()}
    assert modes == {"files": "0o755", "outputs": "0o777", "skills": "0o755", "state": "0o700"}


async def test_uploads_are_read_only_even_to_root(sandbox: DockerSandbox) -> None:
    """Root in the container cannot write, chmod, remove or add below the uploads mount."""
    data = b"read me\n"
    await sandbox.import_file_resource(mount(data), stream(data))
    assert await sandbox.has_file_resource(mount(data))
    assert await sandbox.read_file(PATH) == data
    attempts = await sandbox.exec(
        sh(
            'id -u; for a in "echo x > $1" "chmod 666 $1" "rm -f $1" "touch ${1%/*}/new" '
            '"mv $1 $1.moved"; do sh -c "$a" 2>/dev/null && echo "ALLOWED: $a"; done; cat "$1"',
            PATH,
        )
    )
    assert attempts.stdout == b"0\n" + data, attempts
    with pytest.raises(PathEscapeError, match="read-only"):
        await sandbox.write_file(PATH, b"tool write")
    assert await sandbox.has_file_resource(mount(data))


async def test_a_failed_replacement_keeps_the_previous_bytes_visible(
    sandbox: DockerSandbox,
) -> None:
    """A reader that breaks off or a wrong digest changes nothing the sandbox sees."""
    old, new = b"first\n", b"second\n"
    await sandbox.import_file_resource(mount(old), stream(old))
    with pytest.raises(OSError, match="broke off"):
        await sandbox.import_file_resource(mount(new, SECOND), stream(b"sec", fail=True))
    with pytest.raises(ContentMismatch):
        await sandbox.import_file_resource(mount(new, SECOND), stream(b"other!\n"))
    listing = await sandbox.exec(sh('ls -A "${1%/*}"; cat "$1"', PATH))
    assert listing.stdout == b"data.txt\n" + old
    await sandbox.remove_file_resource(PATH, SECOND)  # stale: FIRST holds the path
    assert await sandbox.has_file_resource(mount(old))
    await sandbox.import_file_resource(mount(new, SECOND), stream(new))
    await sandbox.remove_file_resource(PATH, FIRST)  # stale now
    assert (await sandbox.exec(sh('cat "$1"', PATH))).stdout == new
    await sandbox.remove_file_resource(PATH, SECOND)
    await sandbox.remove_file_resource(PATH, SECOND)
    gone = await sandbox.exec(sh("ls -A /mnt/session/uploads"))
    assert gone.stdout == b""


async def test_tools_and_the_shell_share_the_outputs_directory(sandbox: DockerSandbox) -> None:
    """A tool write is seen by the shell, a shell write by a tool read, and both by the export."""
    await sandbox.write_file("/mnt/session/outputs/nested/tool.txt", b"tool")
    shell = await sandbox.exec(
        sh("cd /mnt/session/outputs && cat nested/tool.txt && printf shell > shell.txt")
    )
    assert shell.stdout == b"tool"
    assert await sandbox.read_file("/mnt/session/outputs/shell.txt") == b"shell"
    assert {k: v for k, v in (await export(sandbox)).items() if v[0] != tarfile.DIRTYPE} == {
        "./nested/tool.txt": (tarfile.REGTYPE, b"tool"),
        "./shell.txt": (tarfile.REGTYPE, b"shell"),
    }
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("/workspace/x", b"absolute workspace paths stay refused")
    with pytest.raises(PathEscapeError):
        await sandbox.read_file("/mnt/session/state")


async def test_the_export_keeps_entry_types_as_they_are(sandbox: DockerSandbox) -> None:
    """A symlink, hardlink and FIFO reach the caller as such; nothing is resolved or dropped."""
    made = await sandbox.exec(
        sh(
            "cd /mnt/session/outputs && echo data > f && ln -s /etc/passwd link && ln f hard "
            "&& mkfifo fifo"
        )
    )
    assert made.exit_code == 0, made
    entries = await export(sandbox)
    kinds = {name: kind for name, (kind, _) in entries.items()}
    assert kinds["./link"] == tarfile.SYMTYPE
    assert kinds["./fifo"] == tarfile.FIFOTYPE
    assert {kinds["./f"], kinds["./hard"]} == {tarfile.REGTYPE, tarfile.LNKTYPE}
    assert b"root:" not in b"".join(content for _, content in entries.values())


async def test_two_clients_of_one_sandbox_share_one_resource_lock(
    provider: DockerProvider, sandbox: DockerSandbox, session_key: str
) -> None:
    """A second client locks the same file: shared holders coexist, an exclusive one waits."""
    other = await provider.attach(session_key, sandbox.ref, SandboxSpec())
    async with sandbox.resource_lock(), other.resource_lock():
        pass  # two shared holders at once
    lock_file = sandbox.host_dir / "state" / ".lock"
    async with sandbox.resource_lock():
        assert not try_flock(lock_file, fcntl.LOCK_EX), (
            "an exclusive holder got in beside an export"
        )
        assert try_flock(lock_file, fcntl.LOCK_SH)
    async with other.resource_lock(exclusive=True):
        assert not try_flock(lock_file, fcntl.LOCK_SH), "a shared holder got in beside an import"
    await other.import_file_resource(mount(b"x"), stream(b"x"))
    assert await other.has_file_resource(mount(b"x"))


async def _old_container(
    engine: Engine, session_key: str, image: str, mounts: list[dict[str, object]] | None = None
) -> str:
    """A container with mango's configuration as it was before the mounts (none, or ``mounts``)."""
    labels = {**RUN_LABELS, **OWNERSHIP.labels(session_key)}
    host = {"Init": True, "NetworkMode": "none", "Memory": 1 << 30, "NanoCpus": 10**9}
    config = {
        "Image": image,
        "Cmd": ["sh", "-c", "while :; do sleep 3600; done"],
        "WorkingDir": "/workspace",
        "Labels": labels,
        "HostConfig": {**host, "PidsLimit": 512, **({"Mounts": mounts} if mounts else {})},
    }
    made = await engine.create_container(OWNERSHIP.name(session_key), config)
    assert made is not None
    return made


async def test_a_container_older_than_the_mounts_fails_closed(
    provider: DockerProvider, docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """Commands still run; File Resources and outputs refuse, saying to recreate the sandbox."""
    made = await _old_container(docker_engine, session_key, test_image)
    try:
        old = await provider.attach(session_key, SandboxRef("docker", made), SandboxSpec())
        assert not old.mounts.uploads
        assert not old.mounts.outputs
        assert (await old.exec(sh("echo still works"))).stdout == b"still works\n"
        assert not await old.has_file_resource(mount(b"x"))
        with pytest.raises(PermanentError, match="recreate the Session's sandbox"):
            await old.import_file_resource(mount(b"x"), stream(b"x"))
        with pytest.raises(PermanentError, match="outputs mount"):
            async with old.open_session_outputs():
                pass
        with pytest.raises(PermanentError, match="recreate the Session's sandbox"):
            async with old.resource_lock():
                pass
        await old.remove_file_resource(PATH, FIRST)  # nothing could hold it: success
        with pytest.raises(PathEscapeError):
            await old.write_file("/mnt/session/outputs/x", b"no outputs root here")
    finally:
        await docker_engine.remove_container(made)


SKILL = SkillMount("skill-1@1", "hello", "/workspace/skills/hello", 1, 1, "0" * 64)


async def test_a_container_older_than_the_skills_mount_fails_closed_for_skills(
    provider: DockerProvider,
    docker_engine: Engine,
    session_key: str,
    test_image: str,
    resource_dir: Path,
) -> None:
    """Made with the uploads and outputs mounts only: adopted, File Resources work, and
    skills refuse saying to recreate the sandbox (a live container gains no bind mount)."""
    host_dir = resource_dir / OWNERSHIP.name(session_key)
    binds: list[dict[str, object]] = []
    for name, target, read_only in (
        ("files", "/mnt/session/uploads", True),
        ("outputs", "/mnt/session/outputs", False),
    ):
        (host_dir / name).mkdir(parents=True, exist_ok=True)
        binds.append({"Type": "bind", "Source": str(host_dir / name), "Target": target,
                      "ReadOnly": read_only})  # fmt: skip
    (host_dir / "state").mkdir(exist_ok=True)
    made = await _old_container(docker_engine, session_key, test_image, binds)
    try:
        old = await provider.attach(session_key, SandboxRef("docker", made), SandboxSpec())
        assert old.mounts == MountState(uploads=True, outputs=True, skills=False)
        await old.import_file_resource(mount(b"x"), stream(b"x"))
        assert await old.has_skill_bundles([SKILL]) == [False]
        with pytest.raises(PermanentError, match="recreate the Session's sandbox"):
            await old.import_skill_bundle(SKILL, stream(b"x"))
        await old.write_file("skills/plain.txt", b"no skills mount: an ordinary directory")
    finally:
        await docker_engine.remove_container(made)


@pytest.mark.parametrize(
    ("mounts", "problem"),
    [
        (
            [("files", "/mnt/session/uploads", False), ("outputs", "/mnt/session/outputs", False)],
            "/mnt/session/uploads is not read-only",
        ),
        ([("elsewhere", "/mnt/session/uploads", True)], "not from"),
        ([("files", "/mnt/session/uploads", True), ("files", "/etc/secrets", True)], "mount"),
        (
            [
                ("files", "/mnt/session/uploads", True),
                ("outputs", "/mnt/session/outputs", False),
                ("skills", "/workspace/skills", False),
            ],
            "/workspace/skills is not read-only",
        ),
        ([("skills", "/workspace/skills", True)], "not a set mango makes"),
    ],
    ids=["writable-uploads", "foreign-source", "extra-mount", "writable-skills", "skills-alone"],
)
async def test_forged_mounts_are_refused(  # noqa: PLR0917 - pytest passes fixtures by position
    provider: DockerProvider,
    docker_engine: Engine,
    session_key: str,
    test_image: str,
    resource_dir: Path,
    mounts: list[tuple[str, str, bool]],
    problem: str,
) -> None:
    """Labels and configuration right, but mounts mango never makes: not adopted."""
    host_dir = resource_dir / OWNERSHIP.name(session_key)
    binds = []
    for name, target, read_only in mounts:
        (host_dir / name).mkdir(parents=True, exist_ok=True)
        binds.append(
            {
                "Type": "bind",
                "Source": str(host_dir / name),
                "Target": target,
                "ReadOnly": read_only,
            }
        )
    labels = {**RUN_LABELS, **OWNERSHIP.labels(session_key)}
    host = {"Init": True, "NetworkMode": "none", "Memory": 1 << 30, "NanoCpus": 10**9}
    config = {
        "Image": test_image,
        "Cmd": ["sleep", "300"],
        "Labels": labels,
        "HostConfig": {**host, "PidsLimit": 512, "Mounts": binds},
    }
    forged = await docker_engine.create_container(OWNERSHIP.name(session_key), config)
    assert forged is not None
    try:
        with pytest.raises(OwnershipError, match=problem):
            await provider.attach(session_key, SandboxRef("docker", forged), SandboxSpec())
    finally:
        await docker_engine.remove_container(forged)


async def test_resource_operations_after_destroy(sandbox: DockerSandbox) -> None:
    """Once destroyed: import and export are SandboxNotFound, removal has nothing left to do."""
    await sandbox.destroy()
    with pytest.raises(SandboxNotFound):
        await sandbox.import_file_resource(mount(b"x"), stream(b"x"))
    with pytest.raises(SandboxNotFound):
        async with sandbox.open_session_outputs():
            pass
    await sandbox.remove_file_resource(PATH, FIRST)
