"""Memory Stores end to end on dockerd and PostgreSQL: mounts, the wave, conflicts, limits.

The module shares one database and one manager (see conftest); each test
makes its own stores and Sessions. What a test checks it reads through the
sandbox (exec) or the database rows, never through the code under test's
own view of the mount. Cost: about eight containers, one database.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from mango.app import SessionManager
from mango.domain import Command, SandboxSpec
from mango.domain.errors import InvalidInput, InvalidMemory, MemoryStoreNotFound
from mango.domain.memories import MEMORY_ROOT, ActorType, MemoryOperation
from mango.domain.ports import Sandbox

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

SPEC = SandboxSpec(timeout=60.0)


def sh(script: str) -> Command:
    return Command(("sh", "-c", script))


async def run(manager: SessionManager, session_id: str, script: str) -> tuple[int, str, str | None]:
    """One tool step: the command inside the Session's wave; (exit code, stdout, failure)."""
    sandbox = await manager.acquire(session_id, SPEC)
    async with manager.tool_step(session_id, SPEC) as step:
        result = await sandbox.exec(sh(script))
    return result.exit_code, result.stdout.decode() + result.stderr.decode(), step.failure


async def new_store(manager: SessionManager, name: str) -> str:
    return (await manager.memory_stores.create(name)).store_id


async def version_rows(url: str, store_id: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            "SELECT path, operation, created_by_type, created_by_id, created_at"
            " FROM mango_memory_versions WHERE memory_store_id = %s ORDER BY created_at, path",
            (store_id,),
        )
        return await cursor.fetchall()


async def test_one_session_writes_another_reads_and_the_history_says_who(
    memory_manager: SessionManager, module_database_url: str
) -> None:
    """A read_write Session's edits become session_actor versions; a read_only one sees them."""
    manager = memory_manager
    store = await new_store(manager, "Team Notes!")
    await manager.memory_stores.write(store, "/notes.md", "hello\n")
    await manager.create_session("writer", memory=[(store, "read_write")])
    code, out, failure = await run(
        manager,
        "writer",
        "cd /mnt/memory/team-notes && cat notes.md && echo more >> notes.md"
        " && mkdir -p deep && echo new > deep/a.md",
    )
    assert (code, out, failure) == (0, "hello\n", None)
    assert (await manager.memory_stores.read(store, "/notes.md")).content == "hello\nmore\n"
    await manager.create_session("reader", memory=[(store, "read_only")])
    code, out, _ = await run(
        manager,
        "reader",
        f"cat {MEMORY_ROOT}/team-notes/notes.md {MEMORY_ROOT}/team-notes/deep/a.md;"
        f" echo x > {MEMORY_ROOT}/team-notes/notes.md || echo refused; id -u",
    )
    assert code == 0
    assert out.startswith("hello\nmore\nnew\n")
    assert "Read-only file system" in out
    assert "refused\n0\n" in out  # root in the container, and still refused
    versions = await manager.memory_stores.versions(store, "/notes.md")
    assert [(v.operation, v.actor.type, v.actor.id) for v in versions] == [
        (MemoryOperation.CREATED, ActorType.API_ACTOR, "api"),
        (MemoryOperation.MODIFIED, ActorType.SESSION_ACTOR, "writer"),
    ]
    assert (await manager.memory_stores.read(store, "/notes.md")).content == "hello\nmore\n"
    rows = await version_rows(module_database_url, store)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("/notes.md", "created", "api"),
        ("/deep/a.md", "created", "writer"),
        ("/notes.md", "modified", "writer"),
    ]


async def test_two_sessions_writing_one_path_exactly_one_wins(
    memory_manager: SessionManager, module_database_url: str
) -> None:
    """Both edit the same baseline: the first writeback commits, the second is refused, named."""
    manager = memory_manager
    store = await new_store(manager, "race")
    await manager.memory_stores.write(store, "/plan.md", "v0\n")
    sandboxes: dict[str, Sandbox] = {}
    for sid in ("race-a", "race-b"):
        await manager.create_session(sid, memory=[(store, "read_write")])
        sandboxes[sid] = await manager.acquire(sid, SPEC)
    async with (
        manager.tool_step("race-a", SPEC) as first,
        manager.tool_step("race-b", SPEC) as second,
    ):
        for sid, sandbox in sandboxes.items():
            result = await sandbox.exec(sh(f"echo {sid} > {MEMORY_ROOT}/race/plan.md"))
            assert result.exit_code == 0
    # Leaving the block wrote back b first (the inner step), then a.
    assert second.failure is None
    assert first.failure is not None
    assert "'/plan.md'" in first.failure
    assert "changed in another Session" in first.failure
    assert (await manager.memory_stores.read(store, "/plan.md")).content == "race-b\n"
    rows = await version_rows(module_database_url, store)
    assert [(r[1], r[3]) for r in rows] == [("created", "api"), ("modified", "race-b")]
    # The loser's stale diff is discarded: its mount holds the winner's content, and its
    # next step writes back normally.
    code, out, failure = await run(manager, "race-a", f"cat {MEMORY_ROOT}/race/plan.md")
    assert (code, out, failure) == (0, "race-b\n", None)
    _, _, failure = await run(manager, "race-a", f"echo a2 > {MEMORY_ROOT}/race/plan.md")
    assert failure is None
    assert (await manager.memory_stores.read(store, "/plan.md")).content == "a2\n"


async def test_sixteen_concurrent_tools_share_one_wave(
    memory_manager: SessionManager, module_database_url: str
) -> None:
    """All 16 run at once, and their changes are committed by one transaction."""
    manager = memory_manager
    store = await new_store(manager, "wave")
    sid = "wave"
    await manager.create_session(sid, memory=[(store, "read_write")])
    sandbox = await manager.acquire(sid, SPEC)
    tools = 16
    # Each tool writes its file, then waits until every tool has started: they overlap.
    script = (
        f"echo $0 > {MEMORY_ROOT}/wave/f$0.md; touch /workspace/started-$0;"
        f" while [ $(ls /workspace | grep -c started-) -lt {tools} ]; do sleep 0.05; done"
    )

    async def tool(number: int) -> tuple[int, str | None]:
        async with manager.tool_step(sid, SPEC) as step:
            command = Command(("sh", "-c", script, str(number)), timeout=60.0)
            result = await sandbox.exec(command)
        assert step.end is not None
        return result.exit_code, step.failure, step.end.committed  # type: ignore[return-value]

    results = await asyncio.gather(*(tool(n) for n in range(tools)))
    assert [r[:2] for r in results] == [(0, None)] * tools
    assert sorted(r[2] for r in results) == [0] * (tools - 1) + [1]  # type: ignore[misc]
    rows = await version_rows(module_database_url, store)
    assert sorted(r[0] for r in rows) == sorted(f"/f{n}.md" for n in range(tools))
    assert {r[4] for r in rows} == {rows[0][4]}  # one transaction's timestamp
    assert {(r[1], r[3]) for r in rows} == {("created", sid)}


async def test_what_breaks_the_limits_is_named_and_discarded(
    memory_manager: SessionManager, module_database_url: str
) -> None:
    """A symlink, an oversized file, non-UTF-8 text: the step says so, naming the file."""
    manager = memory_manager
    store = await new_store(manager, "limits")
    sid = "limits"
    await manager.create_session(sid, memory=[(store, "read_write")])
    root = f"{MEMORY_ROOT}/limits"
    cases = [
        (f"ln -s /etc/passwd {root}/link", "'/link'", "symbolic link"),
        (f"head -c 102401 /dev/zero | tr '\\0' a > {root}/big.md", "'/big.md'", "102401 bytes"),
        (f"printf '\\377' > {root}/bin.md", "'/bin.md'", "not UTF-8"),
    ]
    for script, named, reason in cases:
        _, _, failure = await run(manager, sid, script)
        assert failure is not None
        assert named in failure
        assert reason in failure
        # Discarded: the mount is the heads again.
        code, out, again = await run(manager, sid, f"ls -A {root}")
        assert (code, out, again) == (0, "", None)
    assert await version_rows(module_database_url, store) == []
    _, _, failure = await run(manager, sid, f"printf 'exactly' > {root}/ok.md")
    assert failure is None
    assert (await manager.memory_stores.read(store, "/ok.md")).content == "exactly"


async def test_attachments_are_checked_before_anything_is_written(
    memory_manager: SessionManager,
) -> None:
    """Unknown, duplicate, too many, archived read_write: each refused, no Session row made."""
    manager = memory_manager
    store = await new_store(manager, "checked")
    archived = await new_store(manager, "old")
    await manager.memory_stores.archive(archived)
    missing = "memstore-" + "0" * 32
    refusals: list[tuple[list[tuple[str, str]], type[Exception], str]] = [
        ([(missing, "read_write")], MemoryStoreNotFound, "no memory store"),
        ([(store, "read_write"), (store, "read_only")], InvalidInput, "share the store_id"),
        ([(store, "read_write")] * 9, InvalidInput, "more than the 8"),
        ([(archived, "read_write")], InvalidInput, "archived"),
    ]
    for memory, error, text in refusals:
        with pytest.raises(error, match=text):
            await manager.create_session("refused", memory=memory)  # type: ignore[arg-type]
    assert await manager.store.get_session("refused") is None
    await manager.create_session("archived-ro", memory=[(archived, "read_only")])
    with pytest.raises(InvalidInput, match="read-only"):
        await manager.memory_stores.write(archived, "/a.md", "x")
    await manager.memory_stores.write(store, "/dir", "a file")
    with pytest.raises(InvalidMemory, match="directory of the other"):
        await manager.memory_stores.write(store, "/dir/child.md", "x")
