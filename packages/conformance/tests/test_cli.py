"""The ``mango-conformance`` command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mango_conformance.cli import main


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mango_conformance", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_unknown_target_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown name prints one line naming what is available and exits 2."""
    assert main(["run", "no-such-provider"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        "mango-conformance: no offline conformance target named 'no-such-provider' (available: "
    )
    assert "local" in err[0]


def test_list_names_the_installed_targets(capsys: pytest.CaptureFixture[str]) -> None:
    """``list`` prints one target per line."""
    assert main(["list"]) == 0
    names = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert "local" in names
    assert names == sorted(names)


def test_run_local_passes_the_selected_checks(tmp_path: Path) -> None:
    """``run local`` runs the suite in a child pytest and returns its status."""
    completed = _cli("run", "local", "--profile", "offline-ci", "-k", "l0", "-q", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert "14 passed" in completed.stdout
    assert "profile offline-ci; provider(s): local" in completed.stdout


def test_run_reports_failures_through_the_exit_status(tmp_path: Path) -> None:
    """Pytest's own status comes back: selecting nothing is exit 5."""
    completed = _cli("run", "local", "-k", "no_such_check", "-q", cwd=tmp_path)
    assert completed.returncode == pytest.ExitCode.NO_TESTS_COLLECTED


def test_missing_command_is_a_usage_error() -> None:
    """No sub-command is argparse's usage error (exit 2)."""
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2


def test_a_missing_optional_package_is_a_setup_problem(tmp_path: Path) -> None:
    """A target whose fake needs aiohttp, without aiohttp: one line, the install command, exit 2."""
    blocked = (
        "import sys; sys.modules['aiohttp'] = None; "
        "from mango_conformance.cli import main; sys.exit(main(['run', 'opensandbox']))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", blocked],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert completed.returncode == 2, completed.stdout[-2000:]
    lines = completed.stderr.strip().splitlines()
    expected = (
        "mango-conformance: setup problem: the opensandbox target needs the Python package "
        "'aiohttp', which is not installed: pip install 'mango-core[fake]'"
    )
    assert lines == [expected]
    assert "NOT conformant" not in completed.stdout


def test_a_missing_test_image_is_a_setup_problem(tmp_path: Path) -> None:
    """The Docker target without its image: a setup problem with the hint, not a verdict."""
    completed = subprocess.run(
        [sys.executable, "-m", "mango_conformance", "run", "docker"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "MANGO_CONFORMANCE_DOCKER_IMAGE": "mango-no-such-image:latest"},
    )
    assert completed.returncode == 2, completed.stdout[-2000:]
    assert completed.stderr.startswith("mango-conformance: setup problem: the docker target")
    assert "mango-no-such-image:latest" in completed.stderr
    assert "NOT conformant" not in completed.stdout
