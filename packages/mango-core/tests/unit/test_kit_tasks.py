"""The kit's settle helpers: a task is waited for to its end even when the waiter is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from mango.provider.tasks import cancel_and_settle, settle


async def test_settle_waits_for_the_task_and_leaves_its_outcome_to_the_caller() -> None:
    """A finished task's result and error stay on the task; settle raises neither."""

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    task = asyncio.ensure_future(fails())
    await settle(task)
    assert task.done()
    assert isinstance(task.exception(), ValueError)


async def test_a_cancelled_waiter_still_waits_then_reraises() -> None:
    """Cancelling the waiter does not abandon the task: it ends first, then CancelledError."""
    release = asyncio.Event()
    finished: list[str] = []

    async def work() -> str:
        await release.wait()
        finished.append("work")
        return "done"

    task = asyncio.ensure_future(work())
    waiter = asyncio.ensure_future(settle(task))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    assert not waiter.done(), "the waiter must not give up while the task runs"
    waiter.cancel()  # a second cancellation changes nothing either
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert finished == ["work"]
    assert task.result() == "done"


async def test_cancel_and_settle_runs_the_tasks_cancellation_path_to_its_end() -> None:
    """The task is cancelled, and its cleanup (which itself awaits) completes before return."""
    cleaned = asyncio.Event()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)
            cleaned.set()

    task = asyncio.ensure_future(work())
    await started.wait()
    await cancel_and_settle(task)
    assert task.cancelled()
    assert cleaned.is_set()


async def test_cancel_and_settle_leaves_a_finished_task_alone() -> None:
    """A task that already finished keeps its result."""
    task = asyncio.ensure_future(asyncio.sleep(0, result=7))
    await task
    await cancel_and_settle(task)
    assert task.result() == 7
