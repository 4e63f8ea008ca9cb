"""``mango-conformance run docker``: a container-sized default run that says how far it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_run_docker_sizes_the_machine_for_containers_and_reports_progress(
    test_image: str, tmp_path: Path
) -> None:
    """The registered target is a container target: the default profile gives it 30 examples."""
    env = {**os.environ, "MANGO_CONFORMANCE_DOCKER_IMAGE": test_image}
    env.pop("MANGO_CONFORMANCE_PROFILE", None)  # the developer's default, offline-dev
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mango_conformance",
            "run",
            "docker",
            "-k",
            "state_machine",
            "--mango-steps",
            "5",  # a short machine: the budget's example count is what this test reads
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout
    assert completed.returncode == 0, output[-4000:] + completed.stderr[-2000:]
    prefix = "mango-conformance: lifecycle machine (docker): "
    assert f"{prefix}up to 30 examples of up to 5 steps" in output
    assert f"{prefix}1 example(s) run, " in output
    assert f"{prefix}passed after " in output
    verdict = [line for line in output.splitlines() if "conformant" in line]
    assert verdict[-1].startswith("conformant with 0 waiver(s): 1 check(s) passed, 0 skipped, ")
    assert verdict[-1].endswith(" deselected (not a full run)")
