"""The lifecycle interpreter: one command walked through a table, step by step.

The Session's rows are observed
(:func:`~mango.app.session_manager.context.observe_session`), and the table
(:mod:`mango.domain.lifecycle`) is walked from that state with a
:class:`~mango.domain.lifecycle.Course`: for each step the interpreter checks
the transition's guards, performs its effects through the registry's
handlers, and hands the last effect's signal back to the course, which queues
the follow-ups the table declares. The interpreter holds no lifecycle rule of
its own; it runs whatever table (and registry) it is given. If an effect
finds the rows moved under it (another worker won), the command starts again
from a fresh observation, a few times at most.
"""

from __future__ import annotations

import time
from typing import NoReturn

import attrs

from mango.app import telemetry
from mango.app.session_manager.context import (
    Facts,
    Operation,
    Ports,
    StaleObservation,
    observe_session,
)
from mango.app.session_manager.registry import Handlers
from mango.domain.errors import InvalidTransition, MangoError
from mango.domain.lifecycle import LifecycleSignal, LifecycleState, LifecycleTable

__all__ = ["Interpreter"]

_MAX_REOBSERVE = 4
"""How often one operation re-reads the store after finding its rows changed
under it (another worker bound the Session first) before giving up."""


@attrs.frozen
class Interpreter:
    """Runs commands through ``table`` with ``handlers`` on ``ports``; the caller holds the lock."""

    table: LifecycleTable
    handlers: Handlers
    ports: Ports

    async def run(self, operation: Operation, *, fenced_here: bool = False) -> Facts:
        """Observe, then walk the command through the table; observe again if rows moved."""
        name, sid = self.ports.provider.name, operation.session_id
        with telemetry.operation_span(operation.command.value, name, sid):
            return await self._run_observed(operation, fenced_here=fenced_here)

    async def _run_observed(self, operation: Operation, *, fenced_here: bool) -> Facts:
        for _ in range(_MAX_REOBSERVE):
            observed = await observe_session(
                self.ports,
                operation.session_id,
                use_cache=not operation.fresh,
                fenced_here=fenced_here,
            )
            try:
                return await self._drive(Facts(operation, observed))
            except StaleObservation:
                continue
        raise MangoError(
            f"session {operation.session_id!r} kept changing while "
            f"{operation.command.value} ran; try again"
        )

    async def _drive(self, facts: Facts) -> Facts:
        """Perform the command and its follow-ups: guards, then effects, step by step."""
        course = self.table.course(facts.observed.state, facts.operation.command)
        while True:
            try:
                step = course.next()
            except InvalidTransition as refused:
                failure: InvalidTransition | None = refused
            else:
                failure = None
            if failure is not None:  # outside the handler: the refusal is not "during" it
                self._refuse(facts, course.state, failure)
            if step is None:
                return facts
            command = step.command
            for guard in step.transition.guards:
                self.handlers.guards[guard](self.ports, facts, command)
            signal: LifecycleSignal | None = None
            for effect in step.transition.effects:
                started = time.perf_counter()
                outcome = await self.handlers.effects[effect].run(self.ports, facts)
                facts = facts.adding(outcome)
                signal = outcome.signal  # the table lets only the last effect report one
                elapsed = time.perf_counter() - started
                telemetry.effect_done(self.ports.provider.name, effect, elapsed, signal)
            course.settle(step, signal)

    def _refuse(self, facts: Facts, state: LifecycleState, refused: InvalidTransition) -> NoReturn:
        """A state that does not admit the command: its refusal guard's error, else ``refused``."""
        guard = self.table.refusal(state)
        if guard is not None:
            self.handlers.guards[guard](self.ports, facts, refused.command)
        raise refused
