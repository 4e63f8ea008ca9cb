"""The resource activities: materialize File Resources, publish outputs, reconcile files.

They are methods of :class:`~mango.temporal.activities.MangoActivities`
(this mixin is one of its bases), so a worker registers them with the rest
and workflows name them as ``MangoActivities.<method>``:

* ``MaterializeResources`` runs before a Session's tool step (after the
  acquire): the skills the Session pins and the File Resources its rows
  say, in its sandbox (a skill damaged on the host is repaired);
* ``PublishOutputs`` runs when the Session has been idle for its quiet
  period after a step: the outputs directory becomes the Session's outputs;
  it never creates a sandbox;
* ``ReconcileFiles`` runs in every reconciler pass: stalled uploads,
  unfinished deletions and unrecorded blobs of the Files store.

Long transfers heartbeat. A permanent failure (an output the publisher
refuses, naming the file; a provider without the capability) is
non-retryable; everything else (a daemon, store or database that is away)
is retried.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from mango.app.session_manager import SessionManager
from mango.domain.capabilities import Capability
from mango.temporal._attempts import activity_deadline, boundary, heartbeating
from mango.temporal.resource_messages import (
    MaterializeInput,
    MaterializeOutput,
    PublishOutputsInput,
    PublishOutputsOutput,
    ReconcileFilesInput,
    ReconcileFilesOutput,
)

__all__ = ["ResourceActivities"]


class ResourceActivities:
    """Mixin of :class:`~mango.temporal.activities.MangoActivities`: the resource activities."""

    manager: SessionManager
    heartbeat_interval: float

    def _declares(self, capability: Capability) -> bool:
        declared = self.manager.capabilities
        return capability in (
            declared if declared is not None else self.manager.provider.capabilities
        )

    @property
    def materializes(self) -> bool:
        """Whether this worker's provider takes File Resources or skills (else steps skip it)."""
        files = self._declares(Capability.FILE_RESOURCES) and self.manager.files is not None
        skills = self._declares(Capability.SKILL_BUNDLES) and self.manager.skills is not None
        return files or skills

    @property
    def publishes(self) -> bool:
        """Whether this worker's provider publishes outputs (else idle Sessions skip it)."""
        return self._declares(Capability.SESSION_OUTPUTS) and self.manager.files is not None

    @activity.defn(name="MaterializeResources")
    async def materialize_resources(self, request: MaterializeInput) -> MaterializeOutput:
        """Bring the Session's sandbox's File Resources in line with its rows (before a step)."""

        async def work() -> MaterializeOutput:
            report = await self.manager.materialize(
                request.session_id, request.spec, deadline=activity_deadline()
            )
            return MaterializeOutput(report.imported, report.present, report.removed)

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="PublishOutputs")
    async def publish_outputs(self, request: PublishOutputsInput) -> PublishOutputsOutput:
        """Publish the Session's outputs directory; ``ran=False`` without a sandbox (or support)."""

        async def work() -> PublishOutputsOutput:
            if not self.publishes:
                return PublishOutputsOutput()
            report = await self.manager.publish_outputs(
                request.session_id, request.spec, deadline=activity_deadline()
            )
            if report is None:
                return PublishOutputsOutput()
            return PublishOutputsOutput(
                True, report.files, report.published, report.unchanged, report.removed
            )

        return await boundary(heartbeating(work(), self.heartbeat_interval))

    @activity.defn(name="ReconcileFiles")
    async def reconcile_files(self, request: ReconcileFilesInput) -> ReconcileFilesOutput:
        """One pass of the Files store's reconciler (outputs' crashed uploads included)."""

        async def work() -> ReconcileFilesOutput:
            if self.manager.files is None:
                return ReconcileFilesOutput()
            report = await self.manager.files.files.reconcile(
                stale_after=timedelta(seconds=request.stale_after), limit=request.limit
            )
            return ReconcileFilesOutput(
                report.abandoned_uploads,
                report.removed_files,
                report.orphan_blobs,
                report.incomplete_puts,
                report.failures,
            )

        return await boundary(heartbeating(work(), self.heartbeat_interval))
