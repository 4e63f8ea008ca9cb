"""The Temporal path: ExecCommand and ExecuteTool run the same wave as ``mango exec``.

Activities alone (ActivityEnvironment) over the module's Docker manager; the
versions are read from the database. Cost: two containers.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

from mango.app import SessionManager
from mango.app.tools import ToolCall
from mango.domain import Command, SandboxSpec
from mango.domain.memories import MEMORY_ROOT
from mango.postgres import PostgresBindingStore
from mango.temporal import MangoActivities
from mango.temporal.messages import ExecStepInput, ToolStepInput

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

SPEC = SandboxSpec(timeout=60.0)


def acts(manager: SessionManager, store: PostgresBindingStore) -> MangoActivities:
    return MangoActivities(manager, store, heartbeat_interval=0.05)


async def test_exec_command_and_the_built_in_tools_write_memory_back(
    memory_manager: SessionManager, module_store: PostgresBindingStore
) -> None:
    """A command's edit and a bash tool's file become session_actor versions.

    (The built-in file tools take workspace-relative paths only, so a tool
    reaches the mount through bash.)
    """
    store = (await memory_manager.memory_stores.create("activity")).store_id
    sid = "activity"
    await memory_manager.create_session(sid, memory=[(store, "read_write")])
    env = ActivityEnvironment()
    activities = acts(memory_manager, module_store)
    command = Command(("sh", "-c", f"echo from-exec > {MEMORY_ROOT}/activity/exec.md"))
    result = await env.run(activities.exec_command, ExecStepInput(sid, command, SPEC))
    assert (result.exit_code, result.memory_writeback_error) == (0, None)
    call = ToolCall("bash", {"command": f"echo by tool > {MEMORY_ROOT}/activity/tool.md"})
    tool = await env.run(activities.execute_tool, ToolStepInput(sid, call, SPEC))
    assert tool.memory_writeback_error is None
    heads = await memory_manager.memory_stores.memories(store)
    assert [(h.path, h.content) for h in heads] == [
        ("/exec.md", "from-exec\n"),
        ("/tool.md", "by tool\n"),
    ]
    for path in ("/exec.md", "/tool.md"):
        (version,) = await memory_manager.memory_stores.versions(store, path)
        assert (version.actor.type, version.actor.id) == ("session_actor", sid)


async def test_a_tool_whose_writeback_loses_says_so_in_its_result(
    memory_manager: SessionManager, module_store: PostgresBindingStore
) -> None:
    """The API changes the memory while the tool edits it: the result is marked, naming it."""
    store = (await memory_manager.memory_stores.create("lost race")).store_id
    await memory_manager.memory_stores.write(store, "/c.md", "v0\n")
    sid = "activity-race"
    await memory_manager.create_session(sid, memory=[(store, "read_write")])
    env = ActivityEnvironment()
    activities = acts(memory_manager, module_store)
    script = (
        "while [ ! -e /workspace/go ]; do sleep 0.05; done;"
        f" echo mine > {MEMORY_ROOT}/lost-race/c.md"
    )
    running = asyncio.ensure_future(
        env.run(
            activities.execute_tool,
            ToolStepInput(sid, ToolCall("bash", {"command": script}), SPEC),
        )
    )
    sandbox = await memory_manager.acquire(sid, SPEC)
    while not running.done():
        ready = await sandbox.exec(Command(("sh", "-c", f"cat {MEMORY_ROOT}/lost-race/c.md")))
        if ready.stdout == b"v0\n":  # the wave began: the mount holds the heads
            break
        await asyncio.sleep(0.05)
    await memory_manager.memory_stores.write(store, "/c.md", "theirs\n")
    await sandbox.exec(Command(("touch", "/workspace/go")))
    result = await running
    assert result.memory_writeback_error is not None
    assert "'/c.md'" in result.memory_writeback_error
    assert result.output.endswith(result.memory_writeback_error)
    assert (await memory_manager.memory_stores.read(store, "/c.md")).content == "theirs\n"
