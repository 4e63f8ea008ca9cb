"""The kit's HostMemoryStores on a temporary directory: what a sandbox may leave in a mount.

Nothing below the mount is ever followed: a link to a directory outside it
is refused by name on read and removed (the link, not its target) by a
replace; a replace keeps the files that hold their content already.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.domain.errors import InvalidMemory, PermanentError
from mango.provider import MemoryFile, MemoryStoreMount
from mango.provider.hostmemory import HostMemoryStores

MOUNT = MemoryStoreMount("memstore-" + "a" * 32, "notes")


def stores(tmp_path: Path) -> HostMemoryStores:
    (tmp_path / "memory").mkdir()
    (tmp_path / "state").mkdir()
    host = HostMemoryStores(tmp_path / "memory", tmp_path / "state")
    host.ensure(MOUNT)
    return host


async def test_links_are_refused_by_name_and_removed_not_followed(tmp_path: Path) -> None:
    """A linked directory and a linked file: read refuses, replace removes only the links."""
    host = stores(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host data")
    root = host.directory(MOUNT)
    (root / "dir").symlink_to(outside)
    with pytest.raises(InvalidMemory) as refused:
        await host.read(MOUNT)
    assert refused.value.path == "/dir"
    await host.replace(MOUNT, [MemoryFile("/dir/a.md", "mine", "mem-1")])
    assert (outside / "secret").read_text() == "host data"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert not (root / "dir").is_symlink()
    assert (root / "dir" / "a.md").read_text() == "mine"
    snapshot = await host.read(MOUNT)
    assert snapshot.initialized
    assert [(f.path, f.content) for f in snapshot.files] == [("/dir/a.md", "mine")]


async def test_a_replace_keeps_files_that_hold_their_content(tmp_path: Path) -> None:
    """Unchanged files keep their inode; changed, extra and re-moded ones are rewritten or go."""
    host = stores(tmp_path)
    root = host.directory(MOUNT)
    first = [MemoryFile("/a.md", "a", "m1"), MemoryFile("/d/b.md", "b", "m2")]
    await host.replace(MOUNT, first)
    kept = (root / "a.md").stat().st_ino
    (root / "d" / "b.md").chmod(0o600)
    (root / "extra").mkdir()
    (root / "extra" / "x").write_text("x")
    await host.replace(MOUNT, [MemoryFile("/a.md", "a", "m1"), MemoryFile("/d/b.md", "b", "m9")])
    assert (root / "a.md").stat().st_ino == kept
    assert oct((root / "d" / "b.md").stat().st_mode & 0o777) == "0o644"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["a.md", "d", "d/b.md"]
    snapshot = await host.read(MOUNT)
    assert [e.memory_id for e in snapshot.baseline] == ["m1", "m9"]


async def test_a_broken_baseline_and_a_missing_mount_are_permanent(tmp_path: Path) -> None:
    """Another store's manifest, or no mount directory, is never taken for a baseline."""
    host = stores(tmp_path)
    await host.replace(MOUNT, [])
    other = MemoryStoreMount("memstore-" + "b" * 32, "notes")
    host.manifest(other).write_bytes(host.manifest(MOUNT).read_bytes())
    with pytest.raises(PermanentError, match="baseline"):
        await host.read(other)
    host.directory(MOUNT).rmdir()
    with pytest.raises(PermanentError, match="missing"):
        await host.read(MOUNT)
