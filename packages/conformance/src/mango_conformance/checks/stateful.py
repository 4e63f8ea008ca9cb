"""The stateful check: the lifecycle machine run under the session's profile."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from mango_conformance.checks import mark_checks
from mango_conformance.config import effective_profile, run_config
from mango_conformance.harness import Harness
from mango_conformance.machine import LifecycleMachine, MachineLimits
from mango_conformance.profiles import machine_settings
from mango_conformance.progress import MachineProgress, terminal_writer

__all__ = ["StatefulChecks"]


class StatefulChecks:
    """Runs :class:`~mango_conformance.machine.LifecycleMachine` against the target."""

    machine_class: type[LifecycleMachine] = LifecycleMachine
    """Override with a subclass to add rules of your own."""

    def test_lifecycle_state_machine(
        self, conformance: Harness, request: pytest.FixtureRequest
    ) -> None:
        """Random sequences of lifecycle operations agree with the model (reference section 2)."""
        run = run_config(request.config)
        options = conformance.options
        profile = effective_profile(run, options)
        settings = machine_settings(
            profile,
            provider=conformance.name,
            database_dir=run.database_dir,
            max_examples=run.max_examples or options.max_examples,
            stateful_steps=run.stateful_steps or options.stateful_steps,
            shrink=run.shrink,
            cost=conformance.target.cost,
        )
        progress = MachineProgress(
            terminal_writer(request.config),
            provider=conformance.name,
            max_examples=settings.max_examples,
            steps=settings.stateful_step_count,
        )
        machine = self.machine_class.bind(
            conformance.target,
            options=options,
            limits=MachineLimits.from_profile(profile),
            scratch_dir=conformance.scratch_dir / "machine",
            ledger=conformance.ledger,
            where=request.node.nodeid,
            progress=progress,
        )
        progress.start()
        try:
            run_state_machine_as_test(machine, settings=settings)
        except BaseException:
            progress.finish("failed")
            raise
        progress.finish("passed")


mark_checks(StatefulChecks, pytest.mark.mango_stateful)
