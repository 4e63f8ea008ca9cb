"""Deleting a local sandbox never crosses a mount point, and says what blocks it.

As root (the CI runs as root), a command can bind-mount a host directory into
its workspace and make a file immutable; these tests do exactly that, for
real: ``mount --bind`` and ``chattr +i`` from inside the sandbox. Each is
skipped, with the reason, where the kernel or the file system refuses it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain.errors import RemovalBlocked, SandboxNotFound
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider, LocalSandbox
from mango.local.removal import mounts_within, remove_tree

SPEC = SandboxSpec(timeout=60.0)
NAMESPACE = "removal-test"

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mount and chattr +i need root")


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host directory with data that no deletion may touch."""
    path = tmp_path / "host-data"
    (path / "nested").mkdir(parents=True)
    (path / "precious.txt").write_text("keep me")
    (path / "nested" / "deep.txt").write_text("me too")
    return path


@pytest.fixture
def unmount_afterwards(tmp_path: Path) -> Iterator[None]:
    """Every mount a test leaves under its tmp_path is detached at the end, whatever happened."""
    yield
    for point in mounts_within(tmp_path.resolve()):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


async def host(*argv: str, check: bool = True) -> None:
    """Run ``argv`` on the host (umount, chattr), as an operator would."""
    await asyncio.to_thread(subprocess.run, argv, capture_output=True, check=check)


def host_files(path: Path) -> dict[str, str]:
    """Every file under ``path`` with its content."""
    return {
        str(file.relative_to(path)): file.read_text() for file in path.rglob("*") if file.is_file()
    }


async def run(sandbox: LocalSandbox, script: str) -> None:
    """Run ``script`` in the sandbox; skip the test if the kernel refuses what it asks."""
    result = await sandbox.exec(Command(("sh", "-c", script)))
    if result.exit_code != 0:
        pytest.skip(f"{script!r} was refused here: {result.stderr.decode().strip()}")


def session_of(sandbox: LocalSandbox) -> Path:
    """The session directory of ``sandbox``."""
    return Path(sandbox.ref.external_id)


def leftover(base: Path, sandbox: LocalSandbox) -> Path:
    """The ``.deleting-`` leftover a blocked removal left of ``sandbox``'s directory."""
    (found,) = base.resolve().glob(session_of(sandbox).name + ".deleting-*")
    return found


@root_only
async def test_a_bind_mount_in_the_workspace_is_never_crossed(
    tmp_path: Path, host_dir: Path, unmount_afterwards: None
) -> None:
    """destroy refuses, naming the mount and umount; the host data stays; after umount it ends."""
    base = tmp_path / "sandboxes"
    provider = LocalProvider(base, namespace=NAMESPACE)
    sandbox = await provider.create("mounted", SPEC)
    await run(sandbox, f"mkdir mnt && echo mine > own.txt && mount --bind {host_dir} mnt")
    before = host_files(host_dir)

    with pytest.raises(RemovalBlocked) as caught:
        await provider.destroy("mounted", sandbox.ref)

    blocked = caught.value
    mount_point = leftover(base, sandbox) / "workspace" / "mnt"
    assert blocked.path == str(mount_point)
    assert "is a mount point inside it" in str(blocked)
    assert blocked.hint is not None
    assert f"umount {shlex.quote(str(mount_point))}" in blocked.hint
    assert blocked.permanent
    assert host_files(host_dir) == before
    assert (mount_point.parent / "own.txt").exists()  # nothing was removed at all
    with pytest.raises(SandboxNotFound):  # the sandbox itself is gone for attach
        await provider.attach("mounted", sandbox.ref, SPEC)

    await host("umount", str(mount_point))
    await provider.destroy("mounted", sandbox.ref)
    assert list(base.resolve().glob(session_of(sandbox).name + "*")) == []
    assert host_files(host_dir) == before


@root_only
async def test_a_mount_on_the_workspace_itself_and_nested_mounts_are_all_named(
    tmp_path: Path, host_dir: Path, unmount_afterwards: None
) -> None:
    """A mount on the workspace, one inside it: both named, deepest first, in one umount."""
    base = tmp_path / "sandboxes"
    provider = LocalProvider(base, namespace=NAMESPACE)
    sandbox = await provider.create("nested", SPEC)
    # From inside the sandbox: the workspace becomes the host directory, then a
    # tmpfs (another device) goes onto a directory of it.
    await run(sandbox, f"mount --bind {host_dir} . && mount -t tmpfs none ../workspace/nested")
    with pytest.raises(RemovalBlocked) as caught:
        await provider.destroy("nested", sandbox.ref)
    moved = leftover(base, sandbox) / "workspace"
    assert caught.value.hint is not None
    assert f"umount {moved / 'nested'} {moved}" in caught.value.hint
    assert (host_dir / "precious.txt").read_text() == "keep me"

    await host("umount", str(moved / "nested"))
    await host("umount", str(moved))
    await provider.destroy("nested", sandbox.ref)
    assert host_files(host_dir) == {"precious.txt": "keep me", "nested/deep.txt": "me too"}


@root_only
async def test_a_session_with_a_mount_stays_deletable_through_the_manager(
    tmp_path: Path, host_dir: Path, unmount_afterwards: None
) -> None:
    """delete_session fails naming the mount, the Session stays fenced, and a retry finishes."""
    base = tmp_path / "sandboxes"
    store = InMemoryBindingStore()
    sessions = SessionManager(LocalProvider(base, namespace=NAMESPACE), store)
    await sessions.ensure_session("s")
    sandbox = await sessions.acquire("s", SPEC)
    await run(sandbox, f"mkdir mnt && mount --bind {host_dir} mnt")

    for force in (False, True):  # --force never crosses a mount either
        with pytest.raises(RemovalBlocked, match="mount point"):
            await sessions.delete_session("s", force=force)
    record = await store.get_session("s")
    assert record is not None
    assert record.deleting
    assert (host_dir / "precious.txt").read_text() == "keep me"

    mount_point = leftover(base, sandbox) / "workspace" / "mnt"
    await host("umount", str(mount_point))
    assert await sessions.delete_session("s") is True
    assert await store.get_session("s") is None
    assert host_files(host_dir) == {"precious.txt": "keep me", "nested/deep.txt": "me too"}


@root_only
@pytest.mark.parametrize("where", ["file", "directory"])
async def test_an_immutable_file_is_named_with_chattr_minus_i(tmp_path: Path, where: str) -> None:
    """chattr +i blocks even root and --force: the error names the path and chattr -i."""
    base = tmp_path / "sandboxes"
    provider = LocalProvider(base, namespace=NAMESPACE)
    sandbox = await provider.create("pinned", SPEC)
    target = "d/stuck" if where == "file" else "d"
    await run(sandbox, f"mkdir d && touch d/stuck && chattr +i {target}")
    try:
        for force in (False, True):
            removal = (
                provider.purge("pinned", force=True)
                if force
                else provider.destroy("pinned", sandbox.ref)
            )
            with pytest.raises(RemovalBlocked) as caught:
                await removal
            pinned = leftover(base, sandbox) / "workspace" / target
            assert caught.value.path == str(pinned)
            assert "is immutable (chattr +i)" in str(caught.value)
            assert caught.value.hint is not None
            assert f"chattr -i {pinned}" in caught.value.hint
    finally:
        for found in base.resolve().glob("*/workspace/" + target):
            await host("chattr", "-i", str(found), check=False)
    await provider.destroy("pinned", sandbox.ref)
    assert list(base.resolve().glob(session_of(sandbox).name + "*")) == []


@root_only
async def test_an_append_only_directory_says_chattr_minus_a(tmp_path: Path) -> None:
    """chattr +a on a directory: its entries cannot go; the hint is chattr -a."""
    base = tmp_path / "sandboxes"
    provider = LocalProvider(base, namespace=NAMESPACE)
    sandbox = await provider.create("append", SPEC)
    await run(sandbox, "mkdir log && touch log/a && chattr +a log")
    try:
        with pytest.raises(RemovalBlocked, match=r"append-only \(chattr \+a\)") as caught:
            await provider.destroy("append", sandbox.ref)
        assert caught.value.hint is not None
        assert "chattr -a" in caught.value.hint
    finally:
        for found in base.resolve().glob("*/workspace/log"):
            await host("chattr", "-a", str(found), check=False)
    await provider.destroy("append", sandbox.ref)


def test_mounts_within_reads_the_mount_table() -> None:
    """/proc is a mount point at and below /proc; a plain directory holds none."""
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo here")
    assert Path("/proc") in mounts_within(Path("/proc"))
    assert mounts_within(Path("/proc/self/fd")) == []


def test_a_deep_tree_is_removed_without_running_out_of_anything(tmp_path: Path) -> None:
    """Thousands of levels: no RecursionError, no descriptor exhaustion."""
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(3000):  # past Python's recursion limit and a low descriptor limit
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)
    remove_tree(top)
    assert not top.exists()


def test_links_are_removed_as_links(tmp_path: Path, host_dir: Path) -> None:
    """A link to a host directory, anywhere in the tree or at its top, is removed, not followed."""
    top = tmp_path / "tree"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "out").symlink_to(host_dir)
    (top / "up").symlink_to(tmp_path)
    remove_tree(top)
    assert not top.exists()
    link = tmp_path / "link"
    link.symlink_to(host_dir)
    remove_tree(link)
    assert not link.exists()
    assert host_files(host_dir) == {"precious.txt": "keep me", "nested/deep.txt": "me too"}


def test_a_tree_a_command_locked_is_removed(tmp_path: Path) -> None:
    """Directories without read, write or search permission are opened up and removed."""
    top = tmp_path / "locked"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "a" / "b").chmod(0)
    (top / "a").chmod(0o500)
    try:
        remove_tree(top)
    finally:
        if (top / "a").exists():
            (top / "a").chmod(0o700)
            (top / "a" / "b").chmod(0o700)
    assert not top.exists()
