"""Progress lines of the lifecycle machine, printed while it runs.

The machine is one pytest test that can take minutes against a container or
a remote service; without a word in between, a developer cannot tell a slow
run from a hung one. :class:`MachineProgress` prints a line when the run
starts, then at most one every :data:`PROGRESS_SECONDS` as examples finish
(the first always), and one when it ends. The lines go to pytest's terminal
reporter with output capture suspended, so they appear with or without
``-s`` and ``-v``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import attrs
import pytest

__all__ = ["PROGRESS_SECONDS", "MachineProgress", "terminal_writer"]

PROGRESS_SECONDS = 5.0
"""Least time between two progress lines while the machine runs."""


def terminal_writer(config: pytest.Config) -> Callable[[str], None]:
    """A function writing one line to the terminal, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:
        if reporter is None:  # -p no:terminal: nobody to tell
            return
        suspended = (
            capture.global_and_fixture_disabled()
            if capture is not None
            else contextlib.nullcontext()
        )
        with suspended:
            reporter.write_line(line)

    return write


@attrs.define
class MachineProgress:
    """Counts the machine's examples and provider calls and reports them as it goes."""

    write: Callable[[str], None]
    provider: str
    max_examples: int
    steps: int
    interval: float = PROGRESS_SECONDS
    clock: Callable[[], float] = time.monotonic
    examples: int = 0
    """Machine runs so far (Hypothesis's shrinking and replays included)."""
    calls: int = 0
    """Provider calls made by those runs."""
    _started: float = 0.0
    _last: float | None = None

    def _prefix(self) -> str:
        return f"mango-conformance: lifecycle machine ({self.provider})"

    def _elapsed(self) -> float:
        return self.clock() - self._started

    def start(self) -> None:
        """The run begins: say what it will cost at most."""
        self._started = self.clock()
        self.write(
            f"{self._prefix()}: up to {self.max_examples} examples of up to {self.steps} steps "
            "(shrinking a failure runs more)"
        )

    def example_done(self, calls: int) -> None:
        """One machine run (one example) has ended after ``calls`` provider calls."""
        self.examples += 1
        self.calls += calls
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        self.write(
            f"{self._prefix()}: {self.examples} example(s) run, "
            f"{self.calls} provider calls, {self._elapsed():.0f} s"
        )

    def finish(self, outcome: str) -> None:
        """The run has ended with ``outcome`` (``passed``, ``failed``, ...)."""
        self.write(
            f"{self._prefix()}: {outcome} after {self.examples} example(s), "
            f"{self.calls} provider calls, {self._elapsed():.0f} s"
        )
