"""Temporal's floor for ``bench_temporal_overhead.py``: updates that do (almost) nothing.

A module of its own so that the workflow sandbox can import it by name.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="BenchNoop")
async def noop_activity() -> None:
    """Does nothing: the floor of an activity."""


@workflow.defn(name="BenchFloor")
class Floor:
    """Temporal's floor: updates that do nothing, or run an activity that does nothing."""

    def __init__(self) -> None:
        """Run until told to finish."""
        self._done = False

    @workflow.run
    async def run(self) -> None:
        """Serve updates until ``finish``."""
        await workflow.wait_condition(lambda: self._done)

    @workflow.update
    async def noop(self) -> None:
        """Return at once."""

    @workflow.update
    async def with_activity(self) -> None:
        """Run one no-op activity."""
        await workflow.execute_activity(noop_activity, start_to_close_timeout=timedelta(seconds=30))

    @workflow.update
    async def with_local_activity(self) -> None:
        """Run one no-op local activity."""
        await workflow.execute_local_activity(
            noop_activity, start_to_close_timeout=timedelta(seconds=30)
        )

    @workflow.signal
    def finish(self) -> None:
        """End the run."""
        self._done = True
