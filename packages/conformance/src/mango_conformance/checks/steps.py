"""Once-per-step commands: :class:`~mango.provider.steps.StepSandbox`, or the quirk that says not.

A Temporal step whose worker dies is retried on another worker. A sandbox
that offers ``exec_step`` runs the step's command once: a second call with
the same key, from this provider or a fresh instance (another worker),
never starts it again and answers the first run's result, which is exec's
own (capped streams, flags, exit code, timeout). A provider whose sandboxes
do not offer it should declare ``steps-at-least-once`` (the checks of
``exec_step`` are then skipped); one that offers it must not declare that
quirk. (The crash of a worker mid-command is tested where
real workers run: mango-core's ``tests/temporal/test_step_once.py``.)
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import secrets

import pytest

from mango.provider import Quirk, Sandbox
from mango.provider.steps import StepKey, StepSandbox
from mango_conformance.harness import Harness

__all__ = ["StepChecks"]

ONCE = "echo ran >> step-marks; printf out; printf err >&2; exit 3"
"""A command with a side effect (a line in ``step-marks``), output on both streams, exit 3."""


def _offers(sandbox: Sandbox) -> bool:
    # By attribute: a wrapper that delegates by __getattr__ offers what it wraps.
    return callable(getattr(sandbox, "exec_step", None))


def _steps(sandbox: Sandbox) -> StepSandbox:
    if not _offers(sandbox):
        pytest.skip("the sandbox offers no exec_step: a retried step runs its commands again")
    return sandbox  # type: ignore[return-value]


def _key() -> StepKey:
    return StepKey(secrets.token_hex(16))


class StepChecks:
    """``exec_step`` runs a step's command once, with exec's result; or the quirk says not."""

    def test_step_quirk_matches_the_sandbox(self, conformance: Harness) -> None:
        """A sandbox offering ``exec_step`` does not declare ``steps-at-least-once``.

        One that offers none should declare it (then this check passes);
        one that neither offers nor declares is skipped, as a capability it
        does not declare would be.
        """
        sandbox = conformance.create()
        declared = conformance.options.has_quirk(Quirk.STEPS_AT_LEAST_ONCE)
        if _offers(sandbox):
            assert not declared, "a sandbox offering exec_step declares steps-at-least-once"
        elif not declared:
            pytest.skip("no exec_step and no steps-at-least-once quirk: steps run at least once")

    def test_exec_step_runs_a_command_once(self, conformance: Harness) -> None:
        """Three calls with one key (the last from a fresh provider): one run, one result."""
        key_name = conformance.new_key("steps")
        sandbox = conformance.create(key_name)
        steps = _steps(sandbox)
        key = _key()
        command = conformance.command(ONCE)
        first = conformance.run(steps.exec_step(key, command, timeout=None), "exec_step")
        again = conformance.run(steps.exec_step(key, command, timeout=None), "exec_step again")
        fresh = conformance.attach(key_name, sandbox.ref, conformance.open_provider())
        later = conformance.run(
            _steps(fresh).exec_step(key, command, timeout=None),
            "exec_step from a fresh provider",
        )
        assert first == again == later, "a second call with the same key gave another result"
        assert (first.stdout, first.exit_code, first.timed_out) == (b"out", 3, False), first
        if not conformance.options.has_quirk(Quirk.STDERR_MERGED):
            assert first.stderr == b"err", first
        marks = conformance.run(sandbox.read_file("step-marks"))
        assert marks == b"ran\n", f"the command ran {marks.count(b'ran')} times for one key"
        other = conformance.run(steps.exec_step(_key(), command, timeout=None), "another key")
        assert other.exit_code == 3
        assert conformance.run(sandbox.read_file("step-marks")) == b"ran\nran\n", (
            "another key must run the command again"
        )

    def test_exec_step_output_is_bounded_as_exec_is(self, conformance: Harness) -> None:
        """A flood on both streams: exec_step keeps what exec keeps, with the same flags."""
        sandbox = conformance.create()
        steps = _steps(sandbox)
        size = conformance.options.flood_size
        script = f"head -c {size} /dev/zero; head -c {size} /dev/zero >&2"
        command = conformance.command(script)
        once = conformance.run(steps.exec_step(_key(), command, timeout=None), "exec_step")
        direct = conformance.run(sandbox.exec(command))
        assert (once.stdout_truncated, once.stderr_truncated) == (
            direct.stdout_truncated,
            direct.stderr_truncated,
        )
        assert (once.stdout, once.stderr) == (direct.stdout, direct.stderr), (
            f"exec_step kept {len(once.stdout)}/{len(once.stderr)} bytes, "
            f"exec {len(direct.stdout)}/{len(direct.stderr)}"
        )
        if conformance.options.output_cap is not None:
            assert len(once.stdout) == conformance.options.output_cap

    def test_exec_step_timeout_gives_the_output_so_far(self, conformance: Harness) -> None:
        """A command past its timeout: ``timed_out``, exit -1, what it printed before."""
        sandbox = conformance.create()
        steps = _steps(sandbox)
        command = conformance.command("echo before; exec sleep 60", timeout=1.0)
        result = conformance.run(steps.exec_step(_key(), command, timeout=1.0), "exec_step")
        assert (result.timed_out, result.exit_code) == (True, -1), result
        assert result.stdout == b"before\n", result
