"""The fleet on Temporal: the worker's schedules run the orphan sweep and the idle eviction.

A worker with the fleet settings makes one schedule per job on its task
queue; a triggered run sweeps an orphan (never a provisioning caught between
create and binding) or evicts an idle Session, through the same code as
``mango gc`` and ``SessionManager.evict_idle``. A worker started with the
settings off deletes the schedules. ``mango worker`` reads the settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from temporalio.client import Client, ScheduleHandle
from temporalio.service import RPCError
from temporalio.worker import Replayer

from mango.app import SessionManager
from mango.domain import Command, FleetFull, LifecycleState, SandboxEvicted, SandboxSpec
from mango.domain.fleet import FleetPolicy
from mango.domain.ports import Provider, Sandbox
from mango.domain.values import SandboxRef
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore, PostgresSessionClaims
from mango.temporal import MangoActivities, serve
from mango.temporal.fleet_activities import FleetActivities
from mango.temporal.fleet_messages import EvictionReport, SweepSummary
from mango.temporal.payloads import data_converter
from mango.temporal.schedules import eviction_schedule_id, sweep_schedule_id
from mango.temporal.worker import workflow_runner
from mango.temporal.workflows import WORKFLOWS

from .support import Harness, WorkerProcess, session_dirs, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.usefixtures("_unschedule")]

SPEC = SandboxSpec(timeout=30)
HOUR = 3600.0
POLICY = FleetPolicy(gc_interval=HOUR, gc_older_than=0.0, evict_idle_after=HOUR)
"""Schedules an hour apart (the tests trigger them); every unclaimed resource is an orphan."""


@pytest.fixture
async def _unschedule(harness: Harness) -> AsyncIterator[None]:
    """Delete the test's schedules at the end: the dev server outlives the test."""
    yield
    queue = f"{harness.queue_prefix}-local"
    for schedule_id in (sweep_schedule_id(queue), eviction_schedule_id(queue)):
        with contextlib.suppress(RPCError):
            await harness.client.get_schedule_handle(schedule_id).delete()


async def _backdate(store: PostgresBindingStore, session_id: str, seconds: float) -> None:
    async with store.pool.connection() as conn:
        await conn.execute(
            "UPDATE mango_sandbox_bindings"
            " SET last_used_at = last_used_at - make_interval(secs => %s) WHERE session_id = %s",
            (seconds, session_id),
        )


@contextlib.asynccontextmanager
async def _worker(
    harness: Harness,
    policy: FleetPolicy | None,
    provider: Provider | None = None,
    max_sandboxes: int | None = None,
) -> AsyncIterator[str]:
    """An in-process worker with the fleet activities; yields its task queue."""
    store = harness.store
    assert isinstance(store, PostgresBindingStore)
    manager = SessionManager(provider or harness.provider, store, max_sandboxes=max_sandboxes)
    activities = MangoActivities(
        manager, store, harness.client, task_queue_prefix=harness.queue_prefix
    )
    fleet = FleetActivities(manager, PostgresSessionClaims(store.pool), heartbeat_interval=0.2)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        serve(
            harness.client,
            activities,
            stop=stop,
            fleet=fleet,
            schedules=policy,
            graceful_shutdown=2.0,
            on_ready=ready.set,
        )
    )
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()
    try:
        yield activities.task_queue
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def _exists(handle: ScheduleHandle) -> bool:
    try:
        await handle.describe()
    except RPCError:
        return False
    return True


async def _hold(*handles: ScheduleHandle) -> None:
    """Pause the worker's schedules: only the test's triggers start runs.

    An interval schedule fires at multiples of its interval since the epoch
    (the eviction's of an hour's idle time every 5 minutes), so a test that
    spans such a moment would otherwise meet a run of its own besides the
    triggered one, which would find the orphan swept or the Session evicted
    already. A trigger still starts a run while a schedule is paused.
    """
    for handle in handles:
        await handle.pause(note="driven by the test's triggers")
    for handle in handles:
        described = await handle.describe()
        assert described.schedule.state.paused
        assert described.info.num_actions == 0, "a run started before the pause"


async def _run_now(client: Client, handle: ScheduleHandle, result_type: type[Any]) -> Any:
    """Trigger the schedule and return the result of the run it started.

    The run's history must replay against today's workflow code.
    """
    before = len((await handle.describe()).info.recent_actions)
    await handle.trigger()
    started: list[str] = []

    async def took_action() -> bool:
        actions = (await handle.describe()).info.recent_actions
        if len(actions) > before:
            started.append(actions[-1].action.workflow_id)  # type: ignore[attr-defined]
            return True
        return False

    await wait_until(took_action, 30, "the schedule to start a run")
    run = client.get_workflow_handle(started[0], result_type=result_type)
    result = await run.result()
    replayed = await Replayer(
        workflows=list(WORKFLOWS), data_converter=data_converter, workflow_runner=workflow_runner()
    ).replay_workflow(await run.fetch_history(), raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    return result


@attrs.define
class _Pausing:
    """A provider whose create returns, then waits before the binding is written."""

    inner: LocalProvider
    created: asyncio.Event = attrs.field(factory=asyncio.Event)
    proceed: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        sandbox = await self.inner.create(session_key, spec)
        self.created.set()
        await self.proceed.wait()
        return sandbox

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        await self.inner.destroy(session_key, ref)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_the_schedules_sweep_orphans_and_evict_idle_sessions(harness: Harness) -> None:
    """Triggered runs: the orphan goes, a provisioning in flight stays, an idle Session goes."""
    store, client, base = harness.store, harness.client, harness.sandbox_dir
    assert isinstance(store, PostgresBindingStore)
    manager = SessionManager(harness.provider, store)
    idle, busy, racing = harness.sid("idle"), harness.sid("busy"), harness.sid("racing")
    for name in (idle, busy, racing):
        await store.ensure_session(name)
    await manager.acquire(idle, SPEC)
    await manager.acquire(busy, SPEC)
    await _backdate(store, idle, 2 * HOUR)
    await harness.provider.create(harness.sid("orphan"), SPEC)  # no Session row claims it
    pausing = _Pausing(LocalProvider(base, max_output_bytes=64 * 1024))
    provisioning = SessionManager(pausing, store)  # type: ignore[arg-type]
    acquiring = asyncio.create_task(provisioning.acquire(racing, SPEC))
    async with _worker(harness, POLICY) as queue:
        sweep = client.get_schedule_handle(sweep_schedule_id(queue))
        evict = client.get_schedule_handle(eviction_schedule_id(queue))
        await _hold(sweep, evict)
        described = await sweep.describe()
        [interval] = described.schedule.spec.intervals
        assert interval.every.total_seconds() == HOUR
        [interval] = (await evict.describe()).schedule.spec.intervals
        assert interval.every.total_seconds() == POLICY.evict_interval
        try:
            await asyncio.wait_for(pausing.created.wait(), 60)
            assert len(session_dirs(base)) == 4
            summary = await _run_now(client, sweep, SweepSummary)
            assert (summary.listed, summary.claimed, summary.orphans) == (4, 3, 1)
            assert (summary.destroyed, summary.ok) == (1, True)
        finally:
            pausing.proceed.set()
        kept = await asyncio.wait_for(acquiring, 60)
        assert kept.ref in {SandboxRef("local", str(path)) for path in session_dirs(base)}
        report = await _run_now(client, evict, EvictionReport)
        assert (report.ok, report.evicted, report.kept) == (True, 1, 0)
    assert await manager.observe(idle) is LifecycleState.EVICTED
    with pytest.raises(SandboxEvicted, match="evicted after 2h unused"):
        await SessionManager(harness.provider, store).acquire(idle, SPEC)
    assert await manager.observe(busy) is LifecycleState.BOUND
    assert len(session_dirs(base)) == 2  # busy's and racing's


async def test_a_worker_with_the_settings_off_deletes_the_schedules(harness: Harness) -> None:
    """The schedules follow the settings of the worker that started last."""
    client = harness.client
    async with _worker(harness, POLICY) as queue:
        handles = [
            client.get_schedule_handle(sweep_schedule_id(queue)),
            client.get_schedule_handle(eviction_schedule_id(queue)),
        ]
        assert [await _exists(h) for h in handles] == [True, True]
    only_gc = FleetPolicy(gc_interval=2 * HOUR)
    async with _worker(harness, only_gc):
        assert [await _exists(h) for h in handles] == [True, False]
        [interval] = (await handles[0].describe()).schedule.spec.intervals
        assert interval.every.total_seconds() == 2 * HOUR
    async with _worker(harness, None):
        assert [await _exists(h) for h in handles] == [True, False]  # None: left alone
    async with _worker(harness, FleetPolicy()):
        assert [await _exists(h) for h in handles] == [False, False]


async def test_mango_worker_schedules_what_its_settings_say(
    spawn_worker: Any, harness: Harness
) -> None:
    """``mango worker`` with MANGO_GC_INTERVAL and MANGO_EVICT_IDLE_AFTER makes both schedules."""
    client, queue = harness.client, f"{harness.queue_prefix}-local"
    sweep = client.get_schedule_handle(sweep_schedule_id(queue))
    evict = client.get_schedule_handle(eviction_schedule_id(queue))
    worker: WorkerProcess = spawn_worker(None, MANGO_GC_INTERVAL="2h", MANGO_EVICT_IDLE_AFTER="1m")
    try:
        await worker.wait_ready()
        [interval] = (await sweep.describe()).schedule.spec.intervals
        assert interval.every.total_seconds() == 2 * HOUR
        [interval] = (await evict.describe()).schedule.spec.intervals
        assert interval.every.total_seconds() == 15.0
    finally:
        worker.stop()
    assert worker.process.returncode == 0, worker.text()
    bad: WorkerProcess = spawn_worker(None, MANGO_EVICT_IDLE_AFTER="10s")
    assert await bad.wait_exit() == 2
    assert "MANGO_EVICT_IDLE_AFTER must be from 1m to 7d" in bad.text()
    assert await _exists(evict)  # the refused worker changed nothing


async def test_the_limit_holds_on_the_durable_path(harness: Harness) -> None:
    """A step through Temporal past MANGO_MAX_SANDBOXES fails at once with FleetFull, typed."""
    first, second = harness.sid("first"), harness.sid("second")
    async with _worker(harness, None, max_sandboxes=1):
        done = await harness.orchestrator.exec(first, Command(("echo", "one")))
        assert done.stdout == b"one\n"
        with pytest.raises(FleetFull) as refused:
            await harness.orchestrator.exec(second, Command(("echo", "two")))
        assert refused.value.limit == 1
        assert refused.value.provider == "local"
        assert "MANGO_MAX_SANDBOXES=1" in str(refused.value)
        assert await harness.store.get_intent(second) is None
        assert len(session_dirs(harness.sandbox_dir)) == 1


async def test_a_worker_stopped_during_start_up_is_never_ready(harness: Harness) -> None:
    """A stop that comes before the worker is ready (SIGTERM while it starts) ends it unready.

    ``mango worker`` prints its ready line (and writes ``--ready-file``) from
    ``on_ready``: a worker told to stop while it started must not announce
    itself to a script that waits for it, nor make its schedules.
    """
    store = harness.store
    assert isinstance(store, PostgresBindingStore)
    manager = SessionManager(harness.provider, store)
    activities = MangoActivities(
        manager, store, harness.client, task_queue_prefix=harness.queue_prefix
    )
    fleet = FleetActivities(manager, PostgresSessionClaims(store.pool))
    stop = asyncio.Event()
    stop.set()
    announced: list[str] = []
    await asyncio.wait_for(
        serve(
            harness.client,
            activities,
            stop=stop,
            fleet=fleet,
            schedules=POLICY,
            graceful_shutdown=2.0,
            on_ready=lambda: announced.append("ready"),
        ),
        60,
    )
    assert announced == []
    queue = f"{harness.queue_prefix}-local"
    assert not await _exists(harness.client.get_schedule_handle(sweep_schedule_id(queue)))
