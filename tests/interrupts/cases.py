"""Tests that run until they are interrupted (``tests/test_interrupts.py`` sends the SIGINT).

Not collected by a normal run (the name does not match ``test_*.py``); each
is run by its node id. ``MANGO_TEST_READY`` names a file each creates once
it is where the interrupt must land.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BOUND_SECONDS = 20.0
"""How long a case runs if no interrupt comes (then the run did not stop: the test fails)."""


def _ready() -> None:
    Path(os.environ["MANGO_TEST_READY"]).touch()


class _BlockingFinalizer:
    def __del__(self) -> None:
        _ready()
        time.sleep(BOUND_SECONDS)  # the SIGINT lands here, inside a finalizer


def test_interrupted_in_a_finalizer() -> None:
    """Where a SIGINT lands in ``__del__``, which Python only reports as unraisable."""
    _BlockingFinalizer()


@pytest.fixture
def blocks_in_setup(tmp_path: Path) -> Path:
    """A setup that lasts until interrupted, after tmp_path was made."""
    _ready()
    time.sleep(BOUND_SECONDS)
    return tmp_path


def test_interrupted_in_setup(blocks_in_setup: Path) -> None:
    """Interrupted before it starts."""


@settings(max_examples=10_000, deadline=None, database=None)
@given(st.binary())
def test_interrupted_in_hypothesis(data: bytes) -> None:
    """Interrupted while Hypothesis runs examples."""
    _ready()
    time.sleep(0.002)


def test_after_the_interrupt() -> None:
    """Never runs: the run stopped at the interrupt."""
