"""A step's commands run once across the activity's retries (:mod:`mango.provider.steps`).

The step key comes from the activity's place in its workflow: the workflow
id, its run id and the activity id (the step's sequence number in the run,
for a local activity too). Temporal gives a retried attempt, and the replay
of a local activity after a worker died, the same three; it never enters
the key. A sandbox that keeps no step records (a provider without
:class:`~mango.provider.steps.StepSandbox`) runs the command again on a
retry: at least once, as its quirks say.
"""

from __future__ import annotations

import hashlib

import attrs
from temporalio import activity

from mango.app.wrappers import SandboxWrapper
from mango.domain.ports import Sandbox
from mango.domain.values import Command, ExecResult
from mango.provider.steps import StepKey, StepRecords, exec_once

__all__ = ["OnceSandbox", "once", "step_key"]


def step_key() -> str:
    """The running activity's step key: the same on every attempt of one step."""
    info = activity.info()
    identity = "\0".join((info.workflow_id or "", info.workflow_run_id or "", info.activity_id))
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


@attrs.define
class OnceSandbox(SandboxWrapper):
    """``inner`` whose ``exec`` runs each command of the step once (its n-th under key n)."""

    records: StepRecords = attrs.field(kw_only=True)
    step: str = attrs.field(kw_only=True)
    default_timeout: float | None = attrs.field(kw_only=True)
    _count: int = attrs.field(default=0, init=False)

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command`` once for this step (see :func:`~mango.provider.steps.exec_once`)."""
        key = StepKey(self.step, self._count)
        self._count += 1
        timeout = command.timeout if command.timeout is not None else self.default_timeout
        return await exec_once(self.inner, self.records, key, command, timeout=timeout)


def once(sandbox: Sandbox, default_timeout: float | None) -> Sandbox:
    """``sandbox`` with once-per-step commands where it keeps step records, else itself."""
    records = getattr(sandbox, "step_records", None)
    if not isinstance(records, StepRecords):
        return sandbox
    return OnceSandbox(sandbox, records=records, step=step_key(), default_timeout=default_timeout)
