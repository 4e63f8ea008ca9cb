"""Crashes around a Memory Store writeback: nothing lost, nothing twice, nothing half.

A child worker (``crash_child.py``, its own process on the same database and
Docker daemon) dies by SIGKILL between a tool and its writeback, or inside
the writeback's transaction; this process then runs the next wave, or the
deletion, and checks the versions in the database. Cost: three child
processes (about two seconds each) and three containers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import psycopg
import pytest

from mango.app import SessionManager
from mango.domain import Command, SandboxSpec
from mango.domain.memories import MEMORY_ROOT
from mango.postgres import PostgresBindingStore

from .conftest import RUN_LABELS

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

SPEC = SandboxSpec(timeout=60.0)
CHILD = Path(__file__).with_name("crash_child.py")


async def crash(
    url: str,
    store: PostgresBindingStore,
    resource_dir: Path,
    session_id: str,
    script: str,
    *,
    when: str,
) -> None:
    """Run ``script`` in a child worker that dies by SIGKILL at ``when``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), url, str(resource_dir), await store.deployment_namespace(),
        json.dumps(RUN_LABELS), session_id, script, when,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == -signal.SIGKILL, (out + err).decode(errors="replace")[-3000:]


async def versions(url: str, store_id: str) -> list[tuple[str, str, str]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            "SELECT path, operation, created_by_id FROM mango_memory_versions"
            " WHERE memory_store_id = %s ORDER BY path, created_at",
            (store_id,),
        )
        return [(row[0], row[1], row[2]) for row in await cursor.fetchall()]


async def step(manager: SessionManager, session_id: str, script: str = "true") -> str:
    sandbox = await manager.acquire(session_id, SPEC)
    async with manager.tool_step(session_id, SPEC) as done:
        result = await sandbox.exec(Command(("sh", "-c", script)))
    assert done.failure is None
    return result.stdout.decode()


async def session_with_store(manager: SessionManager, session_id: str, name: str) -> str:
    store = (await manager.memory_stores.create(name)).store_id
    await manager.create_session(session_id, memory=[(store, "read_write")])
    await step(manager, session_id)  # the sandbox exists and its baseline is recorded
    return store


async def test_a_crash_after_the_tool_is_written_back_by_the_next_wave_once(
    memory_manager: SessionManager,
    module_store: PostgresBindingStore,
    module_database_url: str,
    memory_resource_dir: Path,
) -> None:
    """The change survives in the mount; the next wave commits it, and no later one again."""
    sid = "crash-next"
    store = await session_with_store(memory_manager, sid, "after tool")
    script = f"echo survived > {MEMORY_ROOT}/after-tool/kept.md"
    await crash(
        module_database_url, module_store, memory_resource_dir, sid, script, when="after-tool"
    )
    assert await versions(module_database_url, store) == []
    assert await step(memory_manager, sid, f"cat {MEMORY_ROOT}/after-tool/kept.md") == "survived\n"
    await step(memory_manager, sid)
    assert await versions(module_database_url, store) == [("/kept.md", "created", sid)]


async def test_a_crash_after_the_tool_is_written_back_by_the_deletion_once(
    memory_manager: SessionManager,
    module_store: PostgresBindingStore,
    module_database_url: str,
    memory_resource_dir: Path,
) -> None:
    """Deleting the Session writes the change back before the sandbox goes."""
    sid = "crash-delete"
    store = await session_with_store(memory_manager, sid, "before delete")
    script = f"echo last > {MEMORY_ROOT}/before-delete/last.md"
    await crash(
        module_database_url, module_store, memory_resource_dir, sid, script, when="after-tool"
    )
    assert await memory_manager.delete_session(sid)
    assert await versions(module_database_url, store) == [("/last.md", "created", sid)]
    assert (await memory_manager.memory_stores.read(store, "/last.md")).content == "last\n"
    assert await memory_manager.provider.find(sid) is None


async def test_a_crash_inside_the_writeback_transaction_commits_nothing(
    memory_manager: SessionManager,
    module_store: PostgresBindingStore,
    module_database_url: str,
    memory_resource_dir: Path,
) -> None:
    """Versions inserted, then SIGKILL: none of them stays; the next wave commits all once."""
    sid = "crash-transaction"
    store = await session_with_store(memory_manager, sid, "in transaction")
    await memory_manager.memory_stores.write(store, "/old.md", "old\n")
    await step(memory_manager, sid)  # refreshed: old.md is in the mount and the baseline
    root = f"{MEMORY_ROOT}/in-transaction"
    script = f"echo 1 > {root}/one.md; echo 2 > {root}/two.md; echo new > {root}/old.md"
    await crash(
        module_database_url, module_store, memory_resource_dir, sid, script, when="in-transaction"
    )
    assert await versions(module_database_url, store) == [("/old.md", "created", "api")]
    heads = await memory_manager.memory_stores.memories(store)
    assert [(head.path, head.content) for head in heads] == [("/old.md", "old\n")]
    await step(memory_manager, sid)
    await step(memory_manager, sid)
    assert await versions(module_database_url, store) == [
        ("/old.md", "created", "api"),
        ("/old.md", "modified", sid),
        ("/one.md", "created", sid),
        ("/two.md", "created", sid),
    ]


async def test_deleting_a_session_that_never_had_a_sandbox_provisions_none(
    memory_manager: SessionManager,
) -> None:
    """Nothing to write back: the deletion finishes at once and nothing is created."""
    sid = "never-bound"
    store = (await memory_manager.memory_stores.create("never")).store_id
    await memory_manager.create_session(sid, memory=[(store, "read_write")])
    assert await memory_manager.delete_session(sid)
    assert await memory_manager.provider.find(sid) is None
    assert await memory_manager.store.get_session(sid) is None
