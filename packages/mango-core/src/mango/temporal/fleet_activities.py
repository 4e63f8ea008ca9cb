"""The fleet's activities: the orphan sweep and the idle eviction of one worker's provider.

:class:`FleetActivities` is registered beside
:class:`~mango.temporal.activities.MangoActivities` on every worker; the
scheduled workflows (:mod:`mango.temporal.fleet_workflows`) run them on the
provider's task queue. Both are the same code as their direct twins
(``mango gc --yes``, :meth:`~mango.app.SessionManager.evict_idle`), so the
same guarantees hold on the periodic path: the sweep judges only what the
store's claims leave unclaimed (an intent is written before any create, so
a provisioning in flight is always claimed) and stops at the first
unavailable provider; the eviction marks a binding only if it is still
unused. Each heartbeats while it works.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
from temporalio import activity

from mango.app.session_manager import EvictionReport, SessionManager
from mango.app.sweep import sweep_orphans
from mango.domain.fleet import SessionClaims
from mango.temporal._attempts import activity_deadline, boundary, heartbeating
from mango.temporal.fleet_messages import EvictionInput, SweepInput, SweepSummary

__all__ = ["FleetActivities"]

_LOG = logging.getLogger(__name__)


@attrs.define
class FleetActivities:
    """The sweep and the eviction of one worker, bound to its provider through ``manager``."""

    manager: SessionManager
    claims: SessionClaims
    heartbeat_interval: float = 1.0

    def all(self) -> list[Callable[..., Any]]:
        """Every fleet activity, for ``Worker(activities=...)``."""
        return [self.sweep_orphans, self.evict_idle]

    @activity.defn(name="SweepOrphans")
    async def sweep_orphans(self, request: SweepInput) -> SweepSummary:
        """Destroy this provider's orphans at least ``older_than`` old; a summary comes back.

        A provider that cannot list fails the attempt (nothing removed); one
        that fails mid-sweep stops it, reported in the summary.
        """

        async def work() -> SweepSummary:
            provider = self.manager.provider
            report = await sweep_orphans(
                provider, self.claims, older_than=request.older_than, destroy=True
            )
            for item in report.items:
                _LOG.info(
                    "sweep of %s: %s (%s) %s %s",
                    provider.name,
                    item.ref,
                    item.verdict.value,
                    "" if item.outcome is None else item.outcome.value,
                    item.detail,
                )
            return SweepSummary.of(report)

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="EvictIdle")
    async def evict_idle(self, request: EvictionInput) -> EvictionReport:
        """Evict this provider's Sessions unused for ``idle_for`` seconds (one batch)."""
        work = self.manager.evict_idle(
            request.idle_for, request.batch, deadline=activity_deadline()
        )
        return await boundary(heartbeating(work, self.heartbeat_interval))
