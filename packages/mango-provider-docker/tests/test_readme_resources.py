"""The root README's Files and Skills examples, run as a user would paste them into bash.

Each ``$`` line of the block is run in one bash session (so ``export`` and
``FILE=$(...)`` carry over), with ``uv run mango`` meaning this
environment's ``mango`` and the test image standing for
``mango-test-busybox:latest``; what each command prints must be what the
README shows under it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango_provider_docker import Engine

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.slow]

README = Path(__file__).resolve().parents[3] / "README.md"
MANGO = Path(sys.executable).with_name("mango")
MARK = "=== mango-readme-step ==="


SECTIONS = ("### Files in and out of a Session", "### Skills in a Session")


def example(heading: str) -> list[tuple[str, str]]:
    """``(command, expected output)`` for each ``$`` line of the section's example."""
    section = README.read_text(encoding="utf-8").split(heading, 1)[1]
    match = re.search(r"```console\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"the README's {heading!r} section has no console block"
    steps: list[tuple[str, list[str]]] = []
    for line in match.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(command, "".join(f"{out}\n" for out in output)) for command, output in steps]


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711)."""
    root = Path(tempfile.mkdtemp(prefix="mango-readme-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("heading", SECTIONS, ids=["files", "skills"])
def test_the_readme_example_runs(
    docker_engine: Engine, test_image: str, state_dir: Path, tmp_path: Path, heading: str
) -> None:
    """Files: attach, read, write an output, publish, download; Skills: upload, pin, use."""
    steps = example(heading)
    script = "set -e\n" + "".join(
        f"echo '{MARK}'\n{command.replace('uv run mango', str(MANGO))}\n".replace(
            "mango-test-busybox:latest", test_image
        )
        for command, _ in steps
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("MANGO_")}
    env.update(
        MANGO_STATE_DIR=str(state_dir),
        MANGO_SANDBOX_RESOURCE_DIR=str(tmp_path / "resources"),
        MANGO_SANDBOX_PULL="0",
        MANGO_EMBEDDED_IDLE_SECONDS="0",
        # Its own namespace: a container left by an interrupted run is never adopted.
        MANGO_NAMESPACE=f"readme-test-{uuid.uuid4().hex[:12]}",
    )
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    printed = done.stdout.decode().split(f"{MARK}\n")[1:]
    assert len(printed) == len(steps)
    assert [(command, out) for (command, _), out in zip(steps, printed, strict=True)] == steps
    assert done.stderr == b""
    assert list((tmp_path / "resources").iterdir()) == []
