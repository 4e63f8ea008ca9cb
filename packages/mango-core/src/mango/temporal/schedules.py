"""The fleet's Temporal schedules, made by the worker from its settings.

Per task queue (one provider):

* ``mango-gc:<task queue>``: every ``MANGO_GC_INTERVAL``, the
  :class:`~mango.temporal.fleet_workflows.OrphanSweepWorkflow` with
  ``MANGO_GC_OLDER_THAN``;
* ``mango-evict:<task queue>``: every
  :attr:`~mango.domain.fleet.FleetPolicy.evict_interval`, the
  :class:`~mango.temporal.fleet_workflows.IdleEvictionWorkflow` with
  ``MANGO_EVICT_IDLE_AFTER``.

Temporal runs them, whichever worker is up: a schedule skips a run while the
previous one is still going, and of the runs it missed while the server was
down it makes up one at most (its catch-up window is one interval). The
schedules follow the settings of the worker that started last: it creates a
schedule its settings turn on, updates one that exists, and deletes one they
turn off. Give every worker of a provider the same fleet settings.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import attrs
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from mango.domain.fleet import FleetPolicy
from mango.temporal.fleet_messages import EvictionInput, SweepInput
from mango.temporal.fleet_workflows import EVICTION_WORKFLOW, SWEEP_WORKFLOW

__all__ = [
    "FleetSchedule",
    "ensure_fleet_schedules",
    "eviction_schedule_id",
    "fleet_schedules",
    "sweep_schedule_id",
]

_LOG = logging.getLogger(__name__)
_ATTEMPT = 600.0


def sweep_schedule_id(task_queue: str) -> str:
    """Id of the orphan sweep's schedule of one task queue: ``mango-gc:<queue>``."""
    return f"mango-gc:{task_queue}"


def eviction_schedule_id(task_queue: str) -> str:
    """Id of the idle eviction's schedule of one task queue: ``mango-evict:<queue>``."""
    return f"mango-evict:{task_queue}"


@attrs.frozen
class FleetSchedule:
    """One schedule: its id, the workflow it starts, with what, how often (None: no schedule)."""

    schedule_id: str
    workflow: str
    argument: Any
    every: float | None

    def schedule(self, task_queue: str) -> Schedule:
        """The Temporal schedule (only when ``every`` is set)."""
        if self.every is None:  # pragma: no cover - only scheduled ones are built
            raise ValueError(f"{self.schedule_id} is off")
        every = timedelta(seconds=self.every)
        return Schedule(
            action=ScheduleActionStartWorkflow(
                self.workflow,
                self.argument,
                id=self.schedule_id.replace(":", "-run:", 1),
                task_queue=task_queue,
                # Two attempts of the one activity, then the next run takes over.
                execution_timeout=timedelta(seconds=2 * _ATTEMPT + 60),
            ),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
            policy=SchedulePolicy(
                overlap=ScheduleOverlapPolicy.SKIP,
                catchup_window=max(every, timedelta(seconds=10)),
            ),
        )


def fleet_schedules(task_queue: str, policy: FleetPolicy) -> tuple[FleetSchedule, ...]:
    """The sweep's and the eviction's schedules of ``task_queue`` under ``policy``."""
    idle = policy.evict_idle_after
    return (
        FleetSchedule(
            sweep_schedule_id(task_queue),
            SWEEP_WORKFLOW,
            SweepInput(older_than=policy.gc_older_than, attempt_timeout=_ATTEMPT),
            policy.gc_interval,
        ),
        FleetSchedule(
            eviction_schedule_id(task_queue),
            EVICTION_WORKFLOW,
            None if idle is None else EvictionInput(idle_for=idle, attempt_timeout=_ATTEMPT),
            policy.evict_interval,
        ),
    )


async def ensure_fleet_schedules(client: Client, task_queue: str, policy: FleetPolicy) -> None:
    """Create, update or delete the task queue's fleet schedules to match ``policy``."""
    for wanted in fleet_schedules(task_queue, policy):
        handle = client.get_schedule_handle(wanted.schedule_id)
        if wanted.every is None:
            try:
                await handle.delete()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
            else:
                _LOG.info("schedule %s deleted (off in this worker's settings)", wanted.schedule_id)
            continue
        schedule = wanted.schedule(task_queue)
        try:
            await client.create_schedule(wanted.schedule_id, schedule)
        except ScheduleAlreadyRunningError:

            def replace(_current: ScheduleUpdateInput, new: Schedule = schedule) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=new)

            await handle.update(replace)
        _LOG.info("schedule %s runs every %g s", wanted.schedule_id, wanted.every)
