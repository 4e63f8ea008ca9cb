"""Workflows on the real dev server, with an in-process worker on a fresh task queue."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus

from mango.domain import (
    MangoError,
    ProviderUnavailable,
    ProvisioningIntent,
    SandboxNotFound,
    SandboxSpec,
    SessionDeleting,
    spec_hash,
)
from mango.temporal import ToolCall, ToolFailed, session_workflow_id
from mango.temporal.messages import ReconcilerInput

from .support import Harness, session_dirs, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]


def bash(command: str) -> ToolCall:
    """A bash tool call."""
    return ToolCall("bash", {"command": command})


async def test_tool_steps_run_in_order_one_at_a_time(harness: Harness) -> None:
    """Concurrent steps of one Session never interleave; later steps see earlier effects."""
    s1, run = harness.sid("s1"), harness.orchestrator.run_tool
    async with harness.worker():
        await run(s1, ToolCall("write", {"path": "log", "content": ""}))
        steps = [
            run(s1, bash(f"echo start-{i} >> log; sleep 0.05; echo end-{i} >> log"))
            for i in range(4)
        ]
        await asyncio.wait_for(asyncio.gather(*steps), 60)
        log = (await run(s1, ToolCall("read", {"path": "log"}))).output.split()
    assert len(log) == 8
    for start, end in zip(log[::2], log[1::2], strict=True):
        assert start.replace("start", "end") == end


async def test_tool_failures_reach_the_client_as_mango_errors(harness: Harness) -> None:
    """A failed step is raised as its mango error; the workflow keeps serving."""
    s1, run = harness.sid("s1"), harness.orchestrator.run_tool
    edit = ToolCall("edit", {"path": "f", "old_string": "x", "new_string": "y"})
    async with harness.worker():
        await run(s1, ToolCall("write", {"path": "f", "content": "x x"}))
        with pytest.raises(ToolFailed, match="occurs 2 times"):
            await run(s1, edit)
        result = await run(s1, ToolCall("read", {"path": "f"}))
    assert result.output == "x x"


async def test_lost_sandbox_fails_the_step_at_once(harness: Harness) -> None:
    """A vanished sandbox fails the step with SandboxNotFound, never an endless retry."""
    s1, run = harness.sid("s1"), harness.orchestrator.run_tool
    async with harness.worker():
        await run(s1, bash("true"))
    [directory] = session_dirs(harness.sandbox_dir)
    shutil.rmtree(directory)
    async with harness.worker():  # a fresh worker: no cached client
        with pytest.raises(SandboxNotFound, match="no longer exists") as caught:
            await asyncio.wait_for(run(s1, bash("true")), 30)
    assert "delete the session" in (caught.value.hint or "")
    assert session_dirs(harness.sandbox_dir) == []


async def test_delete_removes_sandbox_binding_and_session(harness: Harness) -> None:
    """Deletion destroys the sandbox, then the binding, then the row; a repeat finds nothing."""
    s1, orchestrator, store = harness.sid("s1"), harness.orchestrator, harness.store
    async with harness.worker():
        await orchestrator.run_tool(s1, bash("true"))
        assert len(session_dirs(harness.sandbox_dir)) == 1
        assert await asyncio.wait_for(orchestrator.delete_session(s1), 60) is True
        assert await orchestrator.delete_session(s1) is False
    assert session_dirs(harness.sandbox_dir) == []
    assert (await store.get_session(s1), await store.get_binding(s1)) == (None, None)


async def test_concurrent_deletes_join_one_cleanup(harness: Harness) -> None:
    """Two deletes at once both finish; the Session is gone exactly once."""
    s1, orchestrator = harness.sid("s1"), harness.orchestrator
    async with harness.worker():
        await orchestrator.run_tool(s1, bash("true"))
        both = asyncio.gather(orchestrator.delete_session(s1), orchestrator.delete_session(s1))
        results = await asyncio.wait_for(both, 60)
    assert True in results
    assert session_dirs(harness.sandbox_dir) == []
    assert await harness.store.get_session(s1) is None


async def test_delete_of_a_session_that_never_got_a_sandbox(harness: Harness) -> None:
    """A Session without binding or intent is deleted promptly."""
    empty = harness.sid("empty")
    await harness.store.ensure_session(empty)
    async with harness.worker():
        assert await asyncio.wait_for(harness.orchestrator.delete_session(empty), 30) is True
    assert await harness.store.get_session(empty) is None


async def test_delete_while_a_step_runs_cancels_the_command(harness: Harness) -> None:
    """Deleting mid-step cancels the step and kills its process, then cleans up."""
    s1, orchestrator = harness.sid("s1"), harness.orchestrator
    async with harness.worker():
        await orchestrator.run_tool(s1, bash("true"))
        [directory] = session_dirs(harness.sandbox_dir)
        pid_file = directory / "workspace" / "pid"
        step = asyncio.ensure_future(
            orchestrator.run_tool(s1, bash("echo $$ > pid; exec sleep 120"))
        )

        async def started() -> bool:
            return bool(pid_file.exists() and pid_file.read_text().strip())

        await wait_until(started, 30, "the long step to start")
        pid = int(pid_file.read_text())
        assert await asyncio.wait_for(orchestrator.delete_session(s1), 60) is True
        with pytest.raises(MangoError, match="cancelled"):
            await asyncio.wait_for(step, 30)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert session_dirs(harness.sandbox_dir) == []
    assert await harness.store.get_session(s1) is None


async def test_fenced_sessions_admit_no_new_steps(harness: Harness) -> None:
    """Once fenced, a Session refuses new tool steps."""
    s1 = harness.sid("s1")
    await harness.store.ensure_session(s1)
    await harness.store.fence_session(s1)
    async with harness.worker():
        with pytest.raises(SessionDeleting):
            await harness.orchestrator.run_tool(s1, bash("true"))


async def test_no_worker_fails_fast_with_a_hint(harness: Harness) -> None:
    """Without a worker polling the queue the client explains instead of waiting forever."""
    with pytest.raises(ProviderUnavailable, match="no worker for provider 'local'") as caught:
        await harness.orchestrator.run_tool(harness.sid("s1"), bash("true"))
    assert "mango worker" in (caught.value.hint or "")


async def test_reconciler_finishes_interrupted_deletions_and_intents(harness: Harness) -> None:
    """A fence left by a crashed client and an orphan intent are both finished by the reconciler."""
    fenced, orphan, store = harness.sid("fenced"), harness.sid("orphan"), harness.store
    async with harness.worker():
        await harness.orchestrator.run_tool(fenced, bash("true"))
    await store.fence_session(fenced)  # the client died right after fencing
    await store.ensure_session(orphan)
    spec = SandboxSpec()
    await store.put_intent(ProvisioningIntent(orphan, "local", spec, spec_hash(spec)))

    async def settled() -> bool:
        return (
            await store.get_session(fenced) is None
            and await store.get_intent(orphan) is None
            and await store.get_binding(orphan) is not None
        )

    async with harness.worker(reconciler=ReconcilerInput(interval=0.2)):
        await wait_until(settled, 60, "the reconciler to finish both")
    assert len(session_dirs(harness.sandbox_dir)) == 1  # only the orphan's, now bound


async def test_runs_continue_as_new_and_end_when_idle(harness: Harness) -> None:
    """After steps_per_run steps a run continues as new; an idle run completes; state survives."""
    s1 = harness.sid("s1")
    orchestrator = harness.orchestrator_with(steps_per_run=2, idle_timeout=1.0)
    handle = harness.client.get_workflow_handle(session_workflow_id(s1))
    async with harness.worker():
        await orchestrator.run_tool(s1, ToolCall("write", {"path": "n", "content": "1"}))
        first_run = (await handle.describe()).run_id
        await orchestrator.run_tool(s1, bash("echo 2 >> n"))

        async def rolled_over() -> bool:
            return bool((await handle.describe()).run_id != first_run)

        await wait_until(rolled_over, 30, "continue-as-new")
        result = await orchestrator.run_tool(s1, ToolCall("read", {"path": "n"}))
        assert result.output == "12\n"

        async def idle_completed() -> bool:
            return bool((await handle.describe()).status is WorkflowExecutionStatus.COMPLETED)

        await wait_until(idle_completed, 30, "the idle run to complete")
        again = await orchestrator.run_tool(s1, ToolCall("read", {"path": "n"}))
    assert again.output == "12\n"


async def test_worker_health_through_a_workflow(harness: Harness) -> None:
    """The health workflow returns the worker's report for its provider."""
    async with harness.worker():
        health = await asyncio.wait_for(harness.orchestrator.worker_health(), 30)
    assert (health.provider, health.reachable, health.task_queue) == (
        "local",
        True,
        f"{harness.queue_prefix}-local",
    )
    assert health.worker.endswith(f":{os.getpid()}")


def test_session_dirs_counts_half_deleted_resources_too(tmp_path: Path) -> None:
    """The leak counter counts live and half-destroyed resources alike."""
    (tmp_path / "mango-a").mkdir()
    (tmp_path / "mango-b.deleting-x").mkdir()
    (tmp_path / "other").mkdir()
    assert [p.name for p in session_dirs(tmp_path)] == ["mango-a", "mango-b.deleting-x"]
