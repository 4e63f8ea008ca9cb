"""Crash recovery: ``mango worker`` subprocesses SIGKILLed at injected fault points.

Each scenario starts a worker with ``MANGO_FAULT_POINT`` set, drives a
Session into that point through the real durable path, waits for the worker
to kill itself, starts a clean worker, and checks that every Session ends
bound exactly once or fully deleted, with no leaked or duplicate resource.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from mango.domain import MangoError
from mango.temporal import ToolCall, session_workflow_id
from mango.temporal.faults import FaultPoint

from .support import Harness, WorkerProcess, session_dirs, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]

SIGKILLED = -signal.SIGKILL


def echo(text: str) -> ToolCall:
    """A bash step printing ``text``."""
    return ToolCall("bash", {"command": f"echo {text}"})


async def assert_bound_exactly_once(harness: Harness, session_id: str, base: Path) -> None:
    """One binding, no intent, and exactly one resource on disk: the bound one."""
    binding = await harness.store.get_binding(session_id)
    assert binding is not None
    assert await harness.store.get_intent(session_id) is None
    dirs = session_dirs(base)
    assert [str(d) for d in dirs] == [binding.ref.external_id]


async def assert_fully_deleted(harness: Harness, session_id: str, base: Path) -> None:
    """No row, binding, intent or resource left."""
    store = harness.store
    assert (
        await store.get_session(session_id),
        await store.get_binding(session_id),
        await store.get_intent(session_id),
    ) == (None, None, None)
    assert session_dirs(base) == []


PROVISIONING_POINTS = [
    FaultPoint.AFTER_INTENT,
    FaultPoint.AFTER_CREATE,
    FaultPoint.AFTER_SETUP,
    FaultPoint.AFTER_BINDING,
]


@pytest.mark.parametrize("point", PROVISIONING_POINTS, ids=str)
async def test_crash_while_provisioning(
    harness: Harness, spawn_worker: Callable[..., WorkerProcess], point: FaultPoint
) -> None:
    """The step survives the crash: it completes on the next worker, on one sandbox."""
    session_id = harness.sid(f"crash-{point}")
    base = harness.sandbox_dir
    faulty = spawn_worker(point.value)
    await faulty.wait_ready()
    step = asyncio.ensure_future(harness.orchestrator.run_tool(session_id, echo("survived")))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    assert f"killing pid {faulty.process.pid} at {point}" in faulty.text()
    assert not step.done()

    clean = spawn_worker()
    await clean.wait_ready()
    result = await asyncio.wait_for(step, 90)
    assert result.output == "survived\n"
    await assert_bound_exactly_once(harness, session_id, base)

    assert await asyncio.wait_for(harness.orchestrator.delete_session(session_id), 90)
    await assert_fully_deleted(harness, session_id, base)


DELETION_POINTS = [
    FaultPoint.AFTER_FENCE,
    FaultPoint.AFTER_RENAME,
    FaultPoint.AFTER_REMOVAL,
    FaultPoint.DURING_DESTROY,
    FaultPoint.AFTER_BINDING_REMOVED,
]


@pytest.mark.parametrize("point", DELETION_POINTS, ids=str)
async def test_crash_during_deletion(
    harness: Harness, spawn_worker: Callable[..., WorkerProcess], point: FaultPoint
) -> None:
    """A deletion interrupted at any step finishes on the next worker; nothing of it is left."""
    session_id = harness.sid(f"crash-{point}")
    base = harness.sandbox_dir
    faulty = spawn_worker(point.value)
    await faulty.wait_ready()
    await harness.orchestrator.run_tool(session_id, echo("bound"))
    await assert_bound_exactly_once(harness, session_id, base)

    deletion = asyncio.ensure_future(harness.orchestrator.delete_session(session_id))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    if point is FaultPoint.DURING_DESTROY:
        assert session_dirs(base) == []  # destroyed...
        assert await harness.store.get_binding(session_id) is not None  # ...but still bound

    clean = spawn_worker()
    await clean.wait_ready()
    assert await asyncio.wait_for(deletion, 90) is True
    await assert_fully_deleted(harness, session_id, base)
    assert not any((base / ".owners").glob("*")), "an owner record was left behind"


async def test_orphaned_intent_is_reconciled_after_a_crash(
    harness: Harness, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """With no step waiting for it, the restarted worker's reconciler completes the intent."""
    session_id = harness.sid("orphan")
    base = harness.sandbox_dir
    faulty = spawn_worker(FaultPoint.AFTER_CREATE.value, "--no-reconciler")
    await faulty.wait_ready()
    step = asyncio.ensure_future(harness.orchestrator.run_tool(session_id, echo("x")))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    # An operator gives up on the Session's workflow; only the intent remains.
    await harness.client.get_workflow_handle(session_workflow_id(session_id)).terminate("test")
    with pytest.raises(MangoError):
        await asyncio.wait_for(step, 30)
    assert await harness.store.get_intent(session_id) is not None
    assert len(session_dirs(base)) == 1

    clean = spawn_worker()
    await clean.wait_ready()

    async def reconciled() -> bool:
        return await harness.store.get_intent(session_id) is None

    await wait_until(reconciled, 60, "the reconciler to finish the intent")
    await assert_bound_exactly_once(harness, session_id, base)
