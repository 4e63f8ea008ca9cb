"""The local provider's file API: the race-free walk, bounded listings, atomic renames."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from mango.domain.errors import (
    DirectoryNotEmpty,
    InvalidInput,
    PathEscapeError,
    PathExists,
    PermanentError,
    SandboxNotFound,
)
from mango.domain.sandbox_ports import FileKind, FileSystemSandbox
from mango.domain.values import SandboxSpec
from mango.local import LocalProvider, LocalSandbox

BOUND = 30.0
_RENAME_EXCHANGE = 2


def exchange(first: Path, second: Path) -> None:
    """Atomically swap two names (``renameat2(RENAME_EXCHANGE)``): one always exists at each."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(
        at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), _RENAME_EXCHANGE
    ):
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), str(first))


@pytest.fixture
async def sandbox(tmp_path: Path) -> LocalSandbox:
    return await LocalProvider(tmp_path / "sandboxes").create("fileapi", SandboxSpec())


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the workspace holding ``victim`` and ``only-outside``."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim").write_bytes(b"outside")
    (path / "only-outside").write_bytes(b"outside")
    return path


def test_the_sandbox_implements_the_protocol(sandbox: LocalSandbox) -> None:
    """A local sandbox is a FileSystemSandbox (what the capability promises)."""
    assert isinstance(sandbox, FileSystemSandbox)


async def test_a_parent_swapped_for_a_symlink_mid_call_never_escapes(
    sandbox: LocalSandbox, outside: Path
) -> None:
    """A thread swaps ``d`` with a link to an outside directory as fast as it can.

    Every listing, stat and removal of ``d/victim`` either refuses the link or
    acts on the workspace's own ``d``: nothing outside is listed, stat-ed as
    a workspace entry, or removed. A walk by path (check, then act) loses
    this race within a few hundred calls.
    """
    root = Path(sandbox.root)
    real = root / "d"
    real.mkdir()
    real_fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY)
    link = root / "d.link"
    link.symlink_to(outside)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            exchange(real, link)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    seen_outside, done, refused = [], 0, 0
    try:
        for _ in range(3000):
            if done >= 300:
                break
            # The workspace's d/victim, recreated through a descriptor of d (whichever
            # name it has at the moment).
            victim = os.open("victim", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=real_fd)
            os.write(victim, b"workspace")
            os.close(victim)
            try:
                listing = await sandbox.list_dir("d")
                await sandbox.stat("d/victim")
                await sandbox.remove("d/victim")
            except (PathEscapeError, FileNotFoundError):
                refused += 1
                continue
            done += 1
            names = {entry.name for entry in listing.entries}
            if "only-outside" in names:
                seen_outside.append(sorted(names))
    finally:
        stop.set()
        swapper.join(BOUND)
        os.close(real_fd)
    assert seen_outside == [], f"{len(seen_outside)} listings showed the outside directory"
    assert (outside / "victim").read_bytes() == b"outside", "a removal reached outside"
    assert done > 0, f"every one of {refused} rounds was refused; the race was never run"


async def test_a_removal_never_follows_links_below_it(sandbox: LocalSandbox, outside: Path) -> None:
    """A recursive removal takes the links in the tree, never their targets' contents."""
    root = Path(sandbox.root)
    (root / "tree" / "inner").mkdir(parents=True)
    (root / "tree" / "inner" / "out").symlink_to(outside)
    (root / "tree" / "file-link").symlink_to(outside / "victim")
    await sandbox.remove("tree", recursive=True)
    assert not (root / "tree").exists()
    assert (
        (outside / "victim").read_bytes() == (outside / "only-outside").read_bytes() == b"outside"
    )


async def test_a_top_swapped_for_a_link_is_not_removed_through(
    sandbox: LocalSandbox, outside: Path
) -> None:
    """``remove(link, recursive=True)`` unlinks the link; the directory it names stays whole."""
    (Path(sandbox.root) / "out").symlink_to(outside)
    await sandbox.remove("out", recursive=True)
    assert not (Path(sandbox.root) / "out").is_symlink()
    assert (outside / "victim").read_bytes() == b"outside"


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 17, 60, 1000])
async def test_recursive_listings_are_the_sorted_prefix_at_every_limit(
    sandbox: LocalSandbox, limit: int
) -> None:
    """Whatever order the directories are read in, a listing is the first ``limit`` by path."""
    root = Path(sandbox.root)
    expected = []
    for top in ("zz", "b", "a-b", "a"):
        (root / top / "sub").mkdir(parents=True)
        expected += [top, f"{top}/sub"]
        for index in range(4):
            (root / top / f"f{index}").write_bytes(b"")
            (root / top / "sub" / f"g{index}").write_bytes(b"")
            expected += [f"{top}/f{index}", f"{top}/sub/g{index}"]
    expected.sort()
    listing = await sandbox.list_dir("", recursive=True, limit=limit)
    assert [entry.path for entry in listing.entries] == expected[:limit]
    assert listing.truncated == (len(expected) > limit)


async def test_a_large_directory_is_listed_within_its_limit(sandbox: LocalSandbox) -> None:
    """1500 entries, limit 10: the first ten names, truncated; the whole at its own count."""
    big = Path(sandbox.root) / "big"
    big.mkdir()
    names = [f"n{index:05d}" for index in range(1500)]
    for name in reversed(names):
        (big / name).write_bytes(b"")
    first = await sandbox.list_dir("big", limit=10)
    assert [entry.name for entry in first.entries] == names[:10]
    assert first.truncated
    whole = await sandbox.list_dir("big", limit=1500)
    assert (len(whole.entries), whole.truncated) == (1500, False)


async def test_listing_limits_are_checked_before_any_io(sandbox: LocalSandbox) -> None:
    """A limit that is not an int from 1 to the maximum is InvalidInput, even for a bad path."""
    for bad in (0, -3, 100_001, True, 2.5, "10"):
        with pytest.raises(InvalidInput):
            await sandbox.list_dir("missing", limit=bad)  # type: ignore[arg-type]


async def test_stat_reports_what_lstat_sees(sandbox: LocalSandbox) -> None:
    """Kinds, sizes, modes and an aware mtime, from the entry itself."""
    root = Path(sandbox.root)
    (root / "f").write_bytes(b"abc")
    (root / "f").chmod(0o600)
    (root / "l").symlink_to("f")
    os.mkfifo(root / "fifo")
    info = await sandbox.stat("f")
    assert (info.kind, info.size, info.mode) == (FileKind.FILE, 3, 0o600)
    assert info.mtime is not None
    assert info.mtime.timestamp() == pytest.approx((root / "f").stat().st_mtime)
    assert (await sandbox.stat("l")).kind is FileKind.SYMLINK
    assert (await sandbox.stat("fifo")).kind is FileKind.OTHER
    assert (await sandbox.stat("./f")).path == "f"


async def test_rename_never_replaces_an_empty_directory(sandbox: LocalSandbox) -> None:
    """POSIX rename would replace an empty directory; the file API refuses with PathExists."""
    root = Path(sandbox.root)
    (root / "src").mkdir()
    (root / "src" / "kept").write_bytes(b"k")
    (root / "empty").mkdir()
    with pytest.raises(PathExists):
        await sandbox.rename("src", "empty")
    assert (root / "src" / "kept").read_bytes() == b"k"
    assert (root / "empty").is_dir()
    with pytest.raises(PermanentError):
        await sandbox.rename("src", "src/inside")  # into itself


async def test_remove_of_a_non_empty_directory_keeps_it(sandbox: LocalSandbox) -> None:
    """Without ``recursive`` a non-empty directory is DirectoryNotEmpty and stays whole."""
    (Path(sandbox.root) / "d").mkdir()
    (Path(sandbox.root) / "d" / "f").write_bytes(b"f")
    with pytest.raises(DirectoryNotEmpty):
        await sandbox.remove("d")
    assert (Path(sandbox.root) / "d" / "f").read_bytes() == b"f"


async def test_a_vanished_workspace_is_sandbox_not_found(sandbox: LocalSandbox) -> None:
    """Every operation on a destroyed sandbox raises SandboxNotFound."""
    await sandbox.destroy()
    for call in (
        sandbox.list_dir(""),
        sandbox.stat("x"),
        sandbox.exists("x"),
        sandbox.make_dir("x"),
        sandbox.remove("x"),
        sandbox.rename("x", "y"),
    ):
        with pytest.raises(SandboxNotFound):
            await call
