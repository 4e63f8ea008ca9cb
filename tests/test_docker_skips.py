"""Without a Docker Engine the suite's Docker tests skip; with ``MANGO_REQUIRE_DOCKER=1`` they fail.

Runs every test marked ``docker`` under ``packages/`` with ``DOCKER_HOST``
pointing at a socket where nothing listens, as on a machine without Docker.
A Docker test that does not ask for one of the fixtures that check the
Engine (``docker_engine``, ``test_image``, ...) fails there instead of
skipping.

When this run collected the whole tree unfiltered (as ``uv run pytest`` does),
the inner runs collect only the files where it found Docker tests (26 of
about 180: each whole-tree collection costs a CPU core some 15 seconds);
otherwise they collect all of ``packages/`` themselves.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .support import REPO

RUN_TIMEOUT = 900.0


def docker_paths_of(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """The files under ``packages/`` that hold Docker tests, or ``packages`` itself.

    A session's own collection (``items``) answers when it is the whole tree
    with nothing deselected by ``-m`` or ``-k``; otherwise the inner run
    collects ``packages/`` and finds them itself.
    """
    packages = REPO / "packages"
    here = config.invocation_params.dir
    collected = {(here / arg.split("::", 1)[0]).resolve() for arg in config.args}
    if config.option.markexpr or config.option.keyword or not collected & {REPO, packages}:
        return ["packages"]
    files = {
        item.path.relative_to(REPO).as_posix()
        for item in items
        if item.get_closest_marker("docker") is not None and item.path.is_relative_to(packages)
    }
    return sorted(files) or ["packages"]


@pytest.fixture(scope="module")
def docker_paths(request: pytest.FixtureRequest) -> list[str]:
    """:func:`docker_paths_of` this session."""
    return docker_paths_of(request.config, request.session.items)


def _docker_tests(tmp_path: Path, paths: list[str], **extra: str) -> tuple[int, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"MANGO_REQUIRE_DOCKER", "PYTEST_ADDOPTS"}
    }
    env.update(DOCKER_HOST=f"unix://{tmp_path / 'no-docker.sock'}", **extra)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "docker",
            "-p",
            "no:cacheprovider",
            # One process: each skip is decided before any server starts, where four
            # xdist workers would each import everything and start their own (5x slower).
            "-n",
            "0",
            "-rfEs",
            # One line per failure: the long tracebacks of ~200 fixture errors took two
            # thirds of the run to format, and the short summary names each one anyway.
            "--tb=line",
            f"--basetemp={tmp_path / 'basetemp'}",
            *paths,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    return completed.returncode, completed.stdout + completed.stderr


def _outcomes(output: str) -> dict[str, int]:
    summary = output.strip().splitlines()[-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", summary)}


@pytest.mark.slow
def test_docker_tests_skip_without_an_engine(tmp_path: Path, docker_paths: list[str]) -> None:
    """No Docker Engine: not one Docker test fails or errors; they skip."""
    code, output = _docker_tests(tmp_path, docker_paths)
    outcomes = _outcomes(output)
    assert (outcomes.get("failed", 0), outcomes.get("errors", 0)) == (0, 0), output[-6000:]
    assert code == pytest.ExitCode.OK, output[-6000:]
    assert outcomes.get("skipped", 0) > 100, output[-3000:]


@pytest.mark.slow
def test_docker_tests_fail_without_an_engine_when_docker_is_required(
    tmp_path: Path, docker_paths: list[str]
) -> None:
    """``MANGO_REQUIRE_DOCKER=1`` (as CI sets it): no Docker test skips for a missing Engine."""
    code, output = _docker_tests(tmp_path, docker_paths, MANGO_REQUIRE_DOCKER="1")
    assert code == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    skipped_for_docker = [
        line for line in output.splitlines() if line.startswith("SKIPPED") and "Docker" in line
    ]
    assert skipped_for_docker == [], "\n".join(skipped_for_docker)
    assert _outcomes(output).get("errors", 0) + _outcomes(output).get("failed", 0) > 100
