"""Hooks for every test run of the workspace: Ctrl-C stops a run cleanly.

With ``filterwarnings = error`` two things turned an interrupt into a long
traceback, or into no stop at all:

* a SIGINT that lands in a finalizer (``__del__``, a weakref callback such as
  asyncio's ``WeakSet`` bookkeeping) is not raised: Python hands it to
  ``sys.unraisablehook``, pytest turns it into a
  ``PytestUnraisableExceptionWarning``, the warning filter into an error,
  and the run *went on*, with one more failed test and a traceback. Here the
  interrupt stops the run instead: the current test ends (it cannot be
  interrupted where the signal was lost; a second Ctrl-C stops it at once),
  no other starts, and pytest exits 2 with its one-line "Interrupted";
* an interrupt during a test's setup, after ``tmp_path`` was made, left
  pytest's own ``tmp_path`` teardown without the report entry it reads: a
  ``KeyError`` traceback at the end of the run.

``tests/test_interrupts.py`` sends SIGINT to runs of ``tests/interrupts/cases.py``.

The tests marked ``slow`` run first: pytest-xdist hands out tests in
collection order, and the longest ones (under ``tests/``, collected last)
otherwise started when the other workers were nearly done, leaving a tail
of one or two busy workers on an otherwise idle machine.
"""

from __future__ import annotations

import sys

import pytest

# Private, and read by tmp_path's teardown: the entry that tmpdir's own
# pytest_runtest_makereport makes once a phase has a report. An interrupted
# setup never gets one.
from _pytest.tmpdir import tmppath_result_key
from hypothesis import settings

# No deadline per example: a test asserts behaviour, never timing (timings are
# benchmarks'), and Hypothesis's default of 200 ms fails examples that merely
# waited for a CPU on a loaded machine (seen as DeadlineExceeded under xdist).
settings.register_profile("mango", deadline=None)
settings.load_profile("mango")

_LOST_INTERRUPT = "KeyboardInterrupt (Ctrl-C reached a finalizer: stopped after that test)"


class _Interrupts:
    """Turns a KeyboardInterrupt that a finalizer swallowed into a stop of the session."""

    def __init__(self) -> None:
        self.session: pytest.Session | None = None
        self.previous = sys.unraisablehook

    def unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        """Stop the session for a lost interrupt; hand anything else to pytest's hook."""
        if unraisable.exc_type is None or not issubclass(unraisable.exc_type, KeyboardInterrupt):
            self.previous(unraisable)
        elif self.session is not None:
            self.session.shouldstop = _LOST_INTERRUPT

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Remember the session whose run a lost interrupt stops."""
        self.session = session


@pytest.hookimpl(trylast=True)  # after pytest's own unraisable hook is installed: wrap it
def pytest_configure(config: pytest.Config) -> None:
    """Install the wrapper of pytest's unraisable hook."""
    interrupts = _Interrupts()
    config.pluginmanager.register(interrupts, "mango-interrupts")
    sys.unraisablehook = interrupts.unraisable
    config.add_cleanup(lambda: setattr(sys, "unraisablehook", interrupts.previous))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Give tmp_path's teardown its entry before any fixture runs (makereport fills it)."""
    item.stash.setdefault(tmppath_result_key, {})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests marked ``slow`` to the front (a stable sort: each keeps its order)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
