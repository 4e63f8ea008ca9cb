"""Shared fixtures of the self-tests: a pytester set up to run the suite in-process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# Imported here, before any in-process pytester run: pytester removes the modules a
# run imported when it ends, and httpx (imported already) loads httpcore lazily and
# keeps a map of *that* httpcore's exception classes. A run that imported httpcore
# first left every later test of the worker with a new httpcore whose errors httpx
# no longer mapped (raw httpcore.ConnectError instead of httpx.ConnectError).
import httpcore  # noqa: F401
import pytest

TESTS_DIR = Path(__file__).resolve().parent
EXAMPLE_SRC = TESTS_DIR.parents[2] / "docs" / "example-provider" / "src"

INNER_INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
asyncio_default_test_loop_scope = function
filterwarnings = error
addopts = -p no:cacheprovider
"""


@pytest.fixture
def suite_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester whose runs see the mutants module and treat warnings as errors."""
    pytester.makeini(INNER_INI)
    pytester.syspathinsert(TESTS_DIR)
    return pytester


@pytest.fixture
def example_src() -> Path:
    """The ``src`` directory of the guide's example provider."""
    return EXAMPLE_SRC


@pytest.fixture
def outcomes() -> Callable[[pytest.RunResult], dict[str, str]]:
    """A function mapping each test name of a pytester run to its outcome."""
    return outcomes_by_test


def outcomes_by_test(result: pytest.RunResult) -> dict[str, str]:
    """Map each test name (last node-id part) to passed, failed or skipped (call phase wins)."""
    outcomes: dict[str, str] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.when == "call" or report.outcome != "passed":
            outcomes[name] = report.outcome
        else:
            outcomes.setdefault(name, report.outcome)
    return outcomes
