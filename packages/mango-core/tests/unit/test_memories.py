"""Memory Store rules without a database or a sandbox: slugs, paths, limits, the plan.

The writeback plan (:func:`plan_sync`) is the one both repositories apply;
the in-memory repository is checked for the all-or-nothing rule here and
the PostgreSQL one on a real server in ``tests/memory``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.app.converter import converter, structure
from mango.app.memories import InMemoryMemoryRepository, MemoryStores
from mango.app.memory_store import InMemoryBindingStore
from mango.domain.capabilities import CapabilitySet, admit
from mango.domain.errors import (
    CapabilityNotSupported,
    InvalidInput,
    InvalidMemory,
    MemoryConflict,
)
from mango.domain.hashing import spec_hash
from mango.domain.lifecycle import LIFECYCLE, LifecycleCommand, LifecycleEffect, LifecycleState
from mango.domain.memories import (
    MAX_MEMORY_CONTENT_BYTES,
    MAX_MEMORY_FILES,
    Actor,
    BaselineEntry,
    MemoryFile,
    MemoryHead,
    MemoryStoreMount,
    check_files,
    check_memory_content,
    content_sha256,
    memory_slug,
    parse_attachment,
    plan_sync,
    validate_memory_path,
)
from mango.domain.values import SandboxSpec
from mango.local import LocalProvider

STORE = "memstore-" + "a" * 32
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Team Notes!", "team-notes"),
        ("notes", "notes"),
        ("  A__b  ", "-a-b"),
        ("Ünïcode 2", "ünïcode-2"),
        ("a---b---", "a-b"),
    ],
)
def test_the_slug_keeps_letters_and_digits_and_one_dash_between(name: str, slug: str) -> None:
    """Lowercased, other runs collapsed to one '-', a trailing '-' trimmed."""
    assert memory_slug(name) == slug


@pytest.mark.parametrize("name", ["", "!!!", "  ", "x" * 256])
def test_a_name_without_a_usable_slug_is_refused(name: str) -> None:
    """Nothing left, or more than 255 bytes."""
    with pytest.raises(InvalidInput):
        memory_slug(name)


@pytest.mark.parametrize(
    "path",
    [
        "notes.md",
        "/",
        "/a//b",
        "/a/./b",
        "/../x",
        "/a/",
        "/a\x00b",
        "/a\u200bb",
        "/e\u0301",
        "/" + "x" * 256,
        "/" + "a/" * 600 + "b",
    ],
)
def test_bad_memory_paths_are_refused_naming_the_path(path: str) -> None:
    """Relative, the root, unclean, controls, format characters, not NFC, too long."""
    with pytest.raises(InvalidMemory) as caught:
        validate_memory_path(path)
    assert caught.value.path == path


def test_content_limits_name_the_file() -> None:
    """100 KiB of UTF-8 without NUL: one byte more, bad UTF-8 or a NUL is refused."""
    assert check_memory_content("/a.md", b"a" * MAX_MEMORY_CONTENT_BYTES) == "a" * 102_400
    for data, reason in [
        (b"a" * (MAX_MEMORY_CONTENT_BYTES + 1), "102401 bytes"),
        (b"\xff", "not UTF-8"),
        (b"a\x00", "NUL"),
    ]:
        with pytest.raises(InvalidMemory, match=reason) as caught:
            check_memory_content("/a.md", data)
        assert caught.value.path == "/a.md"


def test_attachments_parse_with_read_write_by_default() -> None:
    """``STORE_ID[:read_only|read_write]``."""
    assert parse_attachment(STORE) == (STORE, "read_write")
    assert parse_attachment(f"{STORE}:read_only") == (STORE, "read_only")
    with pytest.raises(InvalidInput, match="neither"):
        parse_attachment(f"{STORE}:rw")
    with pytest.raises(InvalidInput, match="not a memory store id"):
        parse_attachment("notes")


def head(memory_id: str, path: str, content: str) -> MemoryHead:
    return MemoryHead(memory_id, STORE, path, content, content_sha256(content), "v", NOW)


def base(memory_id: str, path: str, content: str) -> BaselineEntry:
    return BaselineEntry(memory_id, path, content_sha256(content))


def test_the_plan_changes_only_what_changed() -> None:
    """Unchanged costs nothing; edits, deletions and new files are planned against the heads."""
    heads = [head("m1", "/keep", "k"), head("m2", "/edit", "e"), head("m3", "/gone", "g")]
    baseline = [base("m1", "/keep", "k"), base("m2", "/edit", "e"), base("m3", "/gone", "g")]
    current = [MemoryFile("/keep", "k"), MemoryFile("/edit", "e2"), MemoryFile("/new", "n")]
    plan = plan_sync(baseline, current, heads)
    assert [(h.memory_id, f.content) for h, f in plan.updates] == [("m2", "e2")]
    assert [h.memory_id for h in plan.deletes] == ["m3"]
    assert [f.path for f in plan.creates] == ["/new"]
    same = [MemoryFile("/keep", "k"), MemoryFile("/edit", "e"), MemoryFile("/gone", "g")]
    assert plan_sync(baseline, same, heads).empty


def test_a_retried_writeback_changes_nothing() -> None:
    """The heads hold the change already (the first attempt committed): nothing to do."""
    baseline = [base("m1", "/a", "old")]
    committed = [head("m1", "/a", "new"), head("m9", "/b", "b")]
    assert plan_sync(baseline, [MemoryFile("/a", "new"), MemoryFile("/b", "b")], committed).empty
    assert plan_sync([base("m1", "/a", "x")], [], []).empty  # deleted elsewhere too


@pytest.mark.parametrize(
    ("heads", "current", "reason"),
    [
        ([head("m1", "/a", "theirs")], [MemoryFile("/a", "mine")], "before its local update"),
        ([], [MemoryFile("/a", "mine")], "before its local update"),
        ([head("m1", "/a", "theirs")], [], "before its local deletion"),
        ([head("m1", "/moved", "old")], [], "before its local deletion"),
        (
            [head("m1", "/a", "old"), head("m2", "/b", "theirs")],
            [MemoryFile("/a", "old"), MemoryFile("/b", "mine")],
            "created in another Session",
        ),
    ],
)
def test_a_change_against_a_changed_baseline_is_a_conflict_naming_the_path(
    heads: list[MemoryHead], current: list[MemoryFile], reason: str
) -> None:
    """Never a silent overwrite."""
    with pytest.raises(MemoryConflict, match=reason) as caught:
        plan_sync([base("m1", "/a", "old")], current, heads)
    assert caught.value.path in ("/a", "/b")


def test_the_store_limit_and_archived_stores_are_refused() -> None:
    """More than 2000 memories, or any change to an archived store."""
    many = [MemoryFile(f"/f{n}", "x") for n in range(MAX_MEMORY_FILES + 1)]
    with pytest.raises(InvalidMemory, match="2001 files"):
        plan_sync([], many, [])
    heads = [head(f"m{n}", f"/f{n}", "x") for n in range(MAX_MEMORY_FILES)]
    with pytest.raises(InvalidMemory, match="more than 2000"):
        plan_sync([], [MemoryFile("/one", "1")], heads)  # others filled the store meanwhile
    with pytest.raises(InvalidInput, match="archived"):
        plan_sync([], [MemoryFile("/a", "a")], [], archived=True)
    assert plan_sync([], [], [], archived=True).empty


async def test_the_in_memory_repository_commits_all_or_nothing() -> None:
    """A conflict on one file of a writeback leaves every head and version as it was."""
    stores = MemoryStores(InMemoryMemoryRepository())
    store = (await stores.create("notes")).store_id
    first = await stores.write(store, "/a.md", "a")
    assert await stores.write(store, "/a.md", "a") == first  # same content: no version
    await stores.write(store, "/b.md", "b")
    baseline = [BaselineEntry(first.memory_id, "/a.md", first.sha256)]
    await stores.write(store, "/a.md", "theirs")
    with pytest.raises(MemoryConflict):
        await stores.repository.sync(
            store,
            baseline,
            [MemoryFile("/a.md", "mine"), MemoryFile("/c.md", "new")],
            Actor.session("s"),
        )
    assert [(h.path, h.content) for h in await stores.memories(store)] == [
        ("/a.md", "theirs"),
        ("/b.md", "b"),
    ]
    assert [v.operation for v in await stores.versions(store, "/a.md")] == [
        "created",
        "modified",
    ]
    assert await stores.versions(store, "/c.md") == []


async def test_providers_without_memory_stores_refuse_at_admission(tmp_path: Path) -> None:
    """Local declares no memory-stores: attaching, or a spec with a mount, is refused first."""
    repository = InMemoryMemoryRepository()
    manager = SessionManager(
        LocalProvider(tmp_path / "local"), InMemoryBindingStore(), memory=repository
    )
    store = (await manager.memory_stores.create("notes")).store_id
    with pytest.raises(CapabilityNotSupported, match="memory store mounts"):
        await manager.create_session("s", memory=[(store, "read_write")])
    assert await manager.store.get_session("s") is None
    spec = SandboxSpec(memory_stores=[MemoryStoreMount(store, "notes")])
    with pytest.raises(CapabilityNotSupported, match="memory store mounts"):
        admit("local", CapabilitySet(), spec)
    with pytest.raises(CapabilityNotSupported):
        await manager.acquire("s", spec)


def test_a_spec_with_memory_mounts_reads_back_with_the_same_hash() -> None:
    """Stored with an intent and read back, the mounts are the same spec; none keeps old hashes."""
    spec = SandboxSpec(memory_stores=[MemoryStoreMount(STORE, "notes", "read_only")], timeout=5.0)
    again = structure(converter.unstructure(spec), SandboxSpec, what="a spec", path="spec")
    assert again == spec
    assert spec_hash(again) == spec_hash(spec)
    assert spec_hash(SandboxSpec(timeout=5.0)) != spec_hash(spec)
    with pytest.raises(InvalidInput, match="twice"):
        SandboxSpec(memory_stores=[MemoryStoreMount(STORE, "a"), MemoryStoreMount(STORE, "b")])


def test_the_deletion_writes_memory_back_after_the_fence_before_the_destroy() -> None:
    """The table says the order; the wave steps never provision."""
    effects = LIFECYCLE.step(LifecycleState.BOUND, LifecycleCommand.DELETE).effects
    assert effects[:3] == (
        LifecycleEffect.FENCE_SESSION,
        LifecycleEffect.FINAL_MEMORY_WRITEBACK,
        LifecycleEffect.DESTROY_RESOURCE,
    )
    for command in (LifecycleCommand.REFRESH_MEMORY, LifecycleCommand.WRITE_BACK_MEMORY):
        assert LIFECYCLE.step(LifecycleState.UNBOUND, command).effects == ()
        assert LIFECYCLE.step(LifecycleState.PROVISIONING, command).effects == ()
    finished = LIFECYCLE.step(LifecycleState.DELETING, LifecycleCommand.DELETION_FINISHED)
    assert LifecycleEffect.DETACH_MEMORY_STORES in finished.effects


async def test_no_memory_may_be_a_directory_of_another() -> None:
    """On write, in a writeback's result and in a replace: a file cannot also be a directory."""
    stores = MemoryStores(InMemoryMemoryRepository())
    store = (await stores.create("nest")).store_id
    await stores.write(store, "/a", "file")
    for path in ("/a/b.md", "/a/b/c.md"):
        with pytest.raises(InvalidMemory, match="directory of the other") as caught:
            await stores.write(store, path, "x")
        assert caught.value.path == path
    await stores.write(store, "/ab", "a sibling, not a child")
    with pytest.raises(MemoryConflict, match="clashes with '/a'") as conflict:
        plan_sync([], [MemoryFile("/a/b", "mine")], [head("m1", "/a", "theirs")])
    assert conflict.value.path == "/a/b"
    with pytest.raises(InvalidMemory, match="below the memory '/x'"):
        check_files([MemoryFile("/x", "1", "m1"), MemoryFile("/x/y", "2", "m2")])
