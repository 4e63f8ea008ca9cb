"""Same-behaviour checks: what a user sees is the same on every provider.

The README promises one behaviour whatever the backend; these checks hold a
provider to the behaviour of the local provider where a remote API would
otherwise show its own (a shell's or ``setsid``'s message for a missing
program, a vendor daemon refusing a working directory that does not exist).
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import pytest

from mango.provider import Command
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = ["MISSING_PROGRAM", "SameBehaviourChecks"]

MISSING_PROGRAM = "mango-conformance-no-such-program"
"""A program name no image has."""


class SameBehaviourChecks:
    """A missing program and a missing working directory, as the local provider treats them."""

    def test_missing_program_reports_command_not_found(self, conformance: Harness) -> None:
        """Exit 127 and exactly ``mango: NAME: command not found`` on stderr, nothing on stdout."""
        sandbox = conformance.create()
        result = conformance.run(sandbox.exec(Command(argv=(MISSING_PROGRAM, "arg"))))
        assert result.exit_code == 127, f"exit code {result.exit_code}, not 127"
        expected = f"mango: {MISSING_PROGRAM}: command not found\n".encode()
        assert result.stderr == expected, (
            f"stderr is {result.stderr[:200]!r}; every provider reports {expected!r}"
        )
        assert result.stdout == b""

    def test_missing_cwd_is_created(self, conformance: Harness) -> None:
        """A ``Command.cwd`` that does not exist yet is created, parents too, and entered."""
        sandbox = conformance.create()
        command = Command(
            argv=(conformance.options.shell, "-c", "pwd > where.txt; printf entered"),
            cwd="fresh/nested/dir",
        )
        result = conformance.run(sandbox.exec(command))
        assert result.exit_code == 0, (
            f"a missing cwd gave exit code {result.exit_code}: {result.stderr[:200]!r}"
        )
        assert result.stdout == b"entered"
        where = conformance.run(sandbox.read_file("fresh/nested/dir/where.txt"))
        assert where.rstrip(b"\n").endswith(b"/fresh/nested/dir")


mark_checks(SameBehaviourChecks, pytest.mark.mango_gap)
