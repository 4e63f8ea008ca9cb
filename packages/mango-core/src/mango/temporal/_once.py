"""A step's commands run once across the activity's retries (:class:`StepSandbox`).

The step key comes from the activity's place in its workflow: the workflow
id, its run id and the activity id (the step's sequence number in the run,
for a local activity too). Temporal gives a retried attempt, and the replay
of a local activity after a worker died, the same three; the attempt never
enters the key. A sandbox that is no :class:`StepSandbox` (a provider that
declares the quirk ``steps-at-least-once``) runs the command again on a
retry: at least once.
"""

from __future__ import annotations

import hashlib
import json
from typing import cast

import attrs
from temporalio import activity

from mango.app.wrappers import SandboxWrapper
from mango.domain.ports import Sandbox, StepSandbox
from mango.domain.sandbox_ports import StepKey
from mango.domain.values import Command, ExecResult

__all__ = ["OnceSandbox", "once", "step_key"]


def step_key() -> str:
    """The running activity's step key: the same on every attempt of one step."""
    info = activity.info()
    identity = "\0".join((info.workflow_id or "", info.workflow_run_id or "", info.activity_id))
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _command_step(step: str, command: Command) -> str:
    """``step`` narrowed to ``command``: a record is collected only by the command that made it.

    A retry runs the same command under the same activity, so it finds its
    record; anything else that came with the same activity identity (an
    ``ActivityEnvironment`` in a test runs every activity as one) runs afresh
    instead of being handed another command's result.
    """
    identity = json.dumps(
        [
            step,
            list(command.argv),
            command.stdin.hex(),
            list(command.env),
            command.cwd,
            command.timeout,
        ],
        separators=(",", ":"),
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


@attrs.define
class OnceSandbox(SandboxWrapper):
    """``inner`` whose ``exec`` runs each command of the step once (the n-th under index n)."""

    step: str = attrs.field(kw_only=True)
    default_timeout: float | None = attrs.field(kw_only=True)
    _count: int = attrs.field(default=0, init=False)

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command`` once for this step (:meth:`StepSandbox.exec_step`)."""
        key = StepKey(_command_step(self.step, command), self._count)
        self._count += 1
        timeout = command.timeout if command.timeout is not None else self.default_timeout
        steps = cast("StepSandbox", self.inner)
        return await steps.exec_step(key, command, timeout=timeout)


def once(sandbox: Sandbox, default_timeout: float | None) -> Sandbox:
    """``sandbox`` with once-per-step commands where it is a :class:`StepSandbox`, else itself.

    The check looks through :class:`SandboxWrapper` layers (a runtime protocol
    check does not see what ``__getattr__`` delegates); the calls go through
    them, so SessionManager's client records a lost sandbox and the
    instrumented one counts one exec per command.
    """
    provided: object = sandbox
    while isinstance(provided, SandboxWrapper):
        provided = provided.inner
    if not isinstance(provided, StepSandbox):
        return sandbox
    return OnceSandbox(sandbox, step=step_key(), default_timeout=default_timeout)
