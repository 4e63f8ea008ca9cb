"""Ctrl-C stops a test run at once, with pytest's one-line summary and no traceback.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group; each
test here starts a pytest run of ``tests/interrupts/cases.py`` in a process
group of its own, waits until the case is where the interrupt must land, and
sends SIGINT to the group. The run must end with exit code 2 (interrupted),
at once (the case after it never starts), and without a traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .support import REPO

CASES = "tests/interrupts/cases.py"
WAIT_SECONDS = 60.0


def _interrupt(case: str, tmp_path: Path) -> tuple[int, str]:
    """Run ``case`` then ``test_after_the_interrupt``; SIGINT the group once the case is ready."""
    ready = tmp_path / "ready"
    env = {**os.environ, "MANGO_TEST_READY": str(ready)}
    env.pop("PYTEST_ADDOPTS", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            # One process: the interrupt lands in the test itself, not in an xdist
            # controller that relays it to its workers.
            "-n",
            "0",
            f"--basetemp={tmp_path / 'basetemp'}",
            f"{CASES}::{case}",
            f"{CASES}::test_after_the_interrupt",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        ready_seen = _wait_for(ready, process)
        if ready_seen:
            os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=WAIT_SECONDS)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = output.decode(errors="replace")
    if not ready_seen:
        pytest.fail(f"{case} never got ready:\n{text}")
    return process.returncode, text


def _wait_for(ready: Path, process: subprocess.Popen[bytes]) -> bool:
    # The case creates the file when it is where the interrupt must land; no
    # timing is asserted, the bound only keeps a broken case from hanging.
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _assert_clean_stop(code: int, output: str) -> None:
    assert code == pytest.ExitCode.INTERRUPTED, output
    assert re.search(r"^!+ (Interrupted: )?KeyboardInterrupt", output, re.MULTILINE), output
    assert "test_after_the_interrupt" not in output.split("collected", 1)[1], output
    for noise in ("Traceback", "Exception ignored", "Warning", "KeyError", "INTERNALERROR"):
        assert noise not in output, output


@pytest.mark.slow
def test_ctrl_c_in_a_finalizer_stops_the_run(tmp_path: Path) -> None:
    """A SIGINT that lands in ``__del__`` stops the run; it is not a warning and a failed test."""
    _assert_clean_stop(*_interrupt("test_interrupted_in_a_finalizer", tmp_path))


@pytest.mark.slow
def test_ctrl_c_during_a_setup_with_tmp_path_ends_without_a_traceback(tmp_path: Path) -> None:
    """An interrupt in a fixture after tmp_path leaves no KeyError traceback behind."""
    _assert_clean_stop(*_interrupt("test_interrupted_in_setup", tmp_path))


@pytest.mark.slow
def test_ctrl_c_during_a_hypothesis_test_stops_the_run(tmp_path: Path) -> None:
    """An interrupt while Hypothesis runs examples stops the run cleanly."""
    _assert_clean_stop(*_interrupt("test_interrupted_in_hypothesis", tmp_path))
