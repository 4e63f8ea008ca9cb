"""The fleet's scheduled workflows: the orphan sweep and the idle eviction. Deterministic.

Each is started by a Temporal schedule of the provider's task queue (made by
the worker: :mod:`mango.temporal.schedules`), never by a timer of mango's
own, and runs one activity on that queue:

* :class:`OrphanSweepWorkflow` (schedule ``mango-gc:<task queue>``, every
  ``MANGO_GC_INTERVAL``): ``SweepOrphans``;
* :class:`IdleEvictionWorkflow` (schedule ``mango-evict:<task queue>``,
  every quarter of ``MANGO_EVICT_IDLE_AFTER``): ``EvictIdle``.

The schedules skip a run while the previous one is still going. An attempt
that fails is retried once; the next scheduled run is the real retry.
Registered names are stable strings, because recorded histories refer to them.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from mango.temporal.fleet_activities import FleetActivities
    from mango.temporal.fleet_messages import (
        EvictionInput,
        EvictionReport,
        SweepInput,
        SweepSummary,
    )

__all__ = [
    "EVICTION_WORKFLOW",
    "FLEET_WORKFLOWS",
    "SWEEP_WORKFLOW",
    "IdleEvictionWorkflow",
    "OrphanSweepWorkflow",
]

SWEEP_WORKFLOW = "OrphanSweepWorkflow"
EVICTION_WORKFLOW = "IdleEvictionWorkflow"
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=5), maximum_attempts=2)
_HEARTBEAT = timedelta(seconds=30)


@workflow.defn(name=SWEEP_WORKFLOW)
class OrphanSweepWorkflow:
    """Sweep the orphans of the task queue's provider, once."""

    @workflow.run
    async def run(self, request: SweepInput) -> SweepSummary:
        """Run the sweep activity."""
        return await workflow.execute_activity_method(
            FleetActivities.sweep_orphans,
            request,
            start_to_close_timeout=timedelta(seconds=request.attempt_timeout),
            heartbeat_timeout=_HEARTBEAT,
            retry_policy=_RETRY,
            summary="sweep orphans",
        )


@workflow.defn(name=EVICTION_WORKFLOW)
class IdleEvictionWorkflow:
    """Evict the idle Sessions of the task queue's provider, one batch."""

    @workflow.run
    async def run(self, request: EvictionInput) -> EvictionReport:
        """Run the eviction activity."""
        return await workflow.execute_activity_method(
            FleetActivities.evict_idle,
            request,
            start_to_close_timeout=timedelta(seconds=request.attempt_timeout),
            heartbeat_timeout=_HEARTBEAT,
            retry_policy=_RETRY,
            summary="evict idle sessions",
        )


FLEET_WORKFLOWS = (OrphanSweepWorkflow, IdleEvictionWorkflow)
"""The fleet's workflow classes, registered on every worker."""
