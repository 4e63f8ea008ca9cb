"""The maintenance deadline: scopes, the timeout it gives, and what a Temporal activity passes."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from mango.domain import SandboxSpec
from mango.domain.deadline import (
    MIN_MAINTENANCE_TIMEOUT,
    current_deadline,
    deadline_in,
    deadline_scope,
    maintenance_timeout,
    remaining_time,
)


async def test_no_deadline_uses_the_spec_timeout() -> None:
    """Without a caller deadline a maintenance command gets the spec's default timeout."""
    assert current_deadline() is None
    assert remaining_time() is None
    assert maintenance_timeout(SandboxSpec(timeout=12)) == 12
    assert maintenance_timeout(SandboxSpec()) is None


async def test_scopes_only_shorten_and_are_restored() -> None:
    """A nested scope keeps the earlier deadline; leaving it restores the outer one."""
    outer = deadline_in(100)
    with deadline_scope(outer) as effective:
        assert effective == outer
        with deadline_scope(deadline_in(500)) as inner:
            assert inner == outer
        with deadline_scope(deadline_in(10)) as inner:
            assert inner is not None
            assert inner < outer
            timeout = maintenance_timeout(SandboxSpec(timeout=600))
            assert timeout is not None
            assert 0 < timeout <= 10
        with deadline_scope(None) as inner:
            assert inner == outer
        assert current_deadline() == outer
    assert current_deadline() is None


async def test_passed_deadline_gives_a_tiny_positive_timeout() -> None:
    """A deadline already passed never yields zero or a negative timeout."""
    with deadline_scope(deadline_in(-3)):
        assert maintenance_timeout(SandboxSpec(timeout=600)) == MIN_MAINTENANCE_TIMEOUT


async def test_scope_is_per_task() -> None:
    """Concurrent operations each see their own deadline (a context variable)."""

    async def seen(seconds: float) -> float | None:
        with deadline_scope(deadline_in(seconds)):
            await asyncio.sleep(0)
            return remaining_time()

    short, long = await asyncio.gather(seen(5), seen(50))
    assert short is not None
    assert long is not None
    assert short <= 5 < long <= 50


async def test_activity_passes_its_remaining_time() -> None:
    """In an activity the deadline is the earlier of start-to-close and schedule-to-close."""
    from mango.temporal._attempts import activity_deadline as _activity_deadline

    @activity.defn
    async def probe() -> float | None:
        deadline = _activity_deadline()
        return None if deadline is None else deadline - asyncio.get_running_loop().time()

    env = ActivityEnvironment()
    now = datetime.now(UTC)
    env.info = dataclasses.replace(
        env.info,
        started_time=now,
        scheduled_time=now - timedelta(seconds=100),
        start_to_close_timeout=timedelta(seconds=60),
        schedule_to_close_timeout=timedelta(seconds=130),
    )
    left = await env.run(probe)
    assert left is not None
    assert 20 < left <= 30
    assert _activity_deadline() is None  # outside an activity
