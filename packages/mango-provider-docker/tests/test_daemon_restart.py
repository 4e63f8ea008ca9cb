"""Attach after a real dockerd restart (opt-in: ``MANGO_DOCKER_RESTART_TEST=1``).

The test stops the daemon named by ``/var/run/docker.pid`` with SIGTERM and
starts it again with ``.ci/start-dockerd`` (default flags: ``--live-restore``,
so running containers survive). It disturbs every other user of the daemon
for a few seconds, which is why it only runs when asked for, and never beside
other pytest-xdist workers: ``MANGO_DOCKER_RESTART_TEST=1 uv run pytest -n 0 THIS``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mango.domain.values import SandboxSpec
from mango_provider_docker import DockerSandbox

from .conftest import make_provider
from .helpers import sh

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("MANGO_DOCKER_RESTART_TEST", "") != "1",
        reason="restarts dockerd; set MANGO_DOCKER_RESTART_TEST=1 to run it",
    ),
    # The tests of the other pytest-xdist workers use the same daemon meanwhile.
    pytest.mark.skipif(
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1,
        reason="restarts dockerd under the other workers' tests; run it in one process (-n 0)",
    ),
]

START_DOCKERD = Path(__file__).resolve().parents[3] / ".ci" / "start-dockerd"
PID_FILE = Path("/var/run/docker.pid")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


async def _stop_dockerd(bound: float = 60.0) -> None:
    pid = int((await asyncio.to_thread(PID_FILE.read_text)).strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + bound
    while _alive(pid):
        if time.monotonic() >= deadline:
            raise AssertionError(f"dockerd (pid {pid}) did not stop within {bound}s")
        await asyncio.sleep(0.1)


async def test_attach_after_a_daemon_restart(
    sandbox: DockerSandbox, session_key: str, test_image: str, resource_dir: Path
) -> None:
    """A fresh provider attaches to the same container after dockerd restarts; data survives."""
    await sandbox.write_file("before-restart.txt", b"kept")
    await _stop_dockerd()
    started = await asyncio.to_thread(
        subprocess.run, ["bash", str(START_DOCKERD)], capture_output=True, text=True, check=False
    )
    assert started.returncode == 0, started.stderr
    fresh = make_provider(resource_dir, test_image)
    try:
        attached = await fresh.attach(session_key, sandbox.ref, SandboxSpec())
        assert await attached.read_file("before-restart.txt") == b"kept"
        assert (await attached.exec(sh("cat before-restart.txt"))).stdout == b"kept"
    finally:
        await fresh.aclose()
