"""Determinism: recorded histories must replay against today's workflow code.

``histories/*.json`` were recorded from real runs on the dev server (tool
steps, a failed step, continue-as-new, a deletion that cancels a running
step, the cleanup, the health check, reconciler passes, ``Exec`` steps as
normal and as local activities and one cancelled by ``CancelStep``). A change that makes a
workflow take a different path on the same history fails here. To re-record
after an intentional, versioned change:
``MANGO_RECORD_HISTORIES=1 pytest -k test_fresh_histories_replay``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from mango.domain import Command
from mango.temporal import ToolCall, ToolFailed, cleanup_workflow_id, session_workflow_id
from mango.temporal.messages import ReconcilerInput, ReconcilerStatus, StepPolicy
from mango.temporal.payloads import data_converter
from mango.temporal.routing import reconciler_workflow_id
from mango.temporal.worker import workflow_runner
from mango.temporal.workflows import WORKFLOWS

from .support import Harness, session_dirs, wait_until

pytestmark = pytest.mark.temporal

HISTORIES = Path(__file__).parent / "histories"
RECORD = os.environ.get("MANGO_RECORD_HISTORIES") == "1"


def replayer() -> Replayer:
    """A replayer configured like a worker."""
    return Replayer(
        workflows=list(WORKFLOWS), data_converter=data_converter, workflow_runner=workflow_runner()
    )


def recorded() -> list[Path]:
    """The committed histories."""
    return sorted(HISTORIES.glob("*.json"))


def test_histories_are_committed() -> None:
    """The recorded histories exist (a missing directory would make replay vacuous)."""
    names = {path.stem for path in recorded()}
    assert names == {
        "session-exec",
        "session-steps",
        "session-cancelled",
        "sandbox-cleanup",
        "provider-health",
        "reconciler",
    }


def load(path: Path) -> WorkflowHistory:
    """A recorded history file."""
    raw = json.loads(path.read_text())
    return WorkflowHistory.from_json(raw["workflow_id"], raw["history"])


@pytest.mark.parametrize("path", recorded(), ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path) -> None:
    """Each recorded history replays without a non-determinism error."""
    history = load(path)
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


@pytest.mark.postgres
async def test_fresh_histories_replay(harness: Harness) -> None:
    """Histories of a run made now replay too (and are what gets recorded)."""
    s1, client = harness.sid("replay"), harness.client
    orchestrator = harness.orchestrator_with(steps_per_run=3)
    handle = client.get_workflow_handle(session_workflow_id(s1))
    reconciler = client.get_workflow_handle(reconciler_workflow_id(f"{harness.queue_prefix}-local"))
    async with harness.worker(reconciler=ReconcilerInput(interval=0.2)):
        await orchestrator.run_tool(s1, ToolCall("write", {"path": "f", "content": "a a"}))
        first_run = (await handle.describe()).run_id
        with pytest.raises(ToolFailed):
            await orchestrator.run_tool(
                s1, ToolCall("edit", {"path": "f", "old_string": "a", "new_string": "b"})
            )
        await orchestrator.run_tool(s1, ToolCall("grep", {"pattern": "a"}))

        async def continued() -> bool:
            return bool((await handle.describe()).run_id != first_run)

        await wait_until(continued, 30, "continue-as-new")
        [directory] = session_dirs(harness.sandbox_dir)
        pid_file = directory / "workspace" / "pid"
        step = asyncio.ensure_future(
            orchestrator.run_tool(s1, ToolCall("bash", {"command": "echo $$ > pid; exec sleep 60"}))
        )

        async def started() -> bool:
            return bool(pid_file.exists() and pid_file.read_text().strip())

        await wait_until(started, 30, "the long step")
        assert await asyncio.wait_for(orchestrator.delete_session(s1), 60)
        with pytest.raises(Exception, match="cancelled"):
            await step
        health = await orchestrator.worker_health()
        assert health.reachable

        async def reconciled_twice() -> bool:
            status = await reconciler.query("Status", result_type=ReconcilerStatus)
            return bool(status.passes >= 2 and status.provisioning is not None)

        await wait_until(reconciled_twice, 30, "two reconciler passes")

    histories = {
        "session-steps": await client.get_workflow_handle(
            session_workflow_id(s1), run_id=first_run
        ).fetch_history(),
        "session-cancelled": await handle.fetch_history(),
        "sandbox-cleanup": await client.get_workflow_handle(
            cleanup_workflow_id(s1)
        ).fetch_history(),
        "reconciler": await reconciler.fetch_history(),
    }
    async for execution in client.list_workflows(
        f"WorkflowType = 'ProviderHealthWorkflow' AND TaskQueue = '{harness.queue_prefix}-local'"
    ):
        histories["provider-health"] = await client.get_workflow_handle(
            execution.id
        ).fetch_history()
    assert set(histories) == {
        "session-steps",
        "session-cancelled",
        "sandbox-cleanup",
        "provider-health",
        "reconciler",
    }
    for name, history in histories.items():
        result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (name, result.replay_failure)
        if RECORD:
            HISTORIES.mkdir(exist_ok=True)
            payload = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
            (HISTORIES / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")


def _keep(name: str, history: WorkflowHistory) -> None:
    HISTORIES.mkdir(exist_ok=True)
    payload = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
    (HISTORIES / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")


@pytest.mark.postgres
async def test_fresh_exec_history_replays(harness: Harness, tmp_path: Path) -> None:
    """Exec steps (normal, local activity, cancelled while running) replay (``session-exec``)."""
    s1, client = harness.sid("exec"), harness.client
    policy = StepPolicy(initial_retry=0.2, max_retry_interval=1.0, local_exec_limit=30.0)
    orchestrator = harness.orchestrator_with(policy=policy)
    pid_file = tmp_path / "pid"
    async with harness.worker():
        await orchestrator.exec(s1, Command(("sh", "-c", "cat; exit 3"), stdin=b"\x00\xff"))
        await orchestrator.exec(s1, Command(("echo", "local"), timeout=5.0))
        step = asyncio.ensure_future(
            orchestrator.exec(s1, Command(("sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 60')))
        )

        async def started() -> bool:
            return bool(pid_file.exists() and pid_file.read_text().strip())

        await wait_until(started, 30, "the long step")
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        await orchestrator.exec(s1, Command(("true",)))
    history = await client.get_workflow_handle(session_workflow_id(s1)).fetch_history()
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    if RECORD:
        _keep("session-exec", history)
