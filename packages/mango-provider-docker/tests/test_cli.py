"""``MANGO_SANDBOX=docker mango exec``: the installed plugin behind the real command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.provider.ownership import Ownership
from mango_provider_docker import Engine

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.slow]

MANGO = Path(sys.executable).with_name("mango")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711, not pytest's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="mango-docker-cli-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


NAMESPACE = "cli-test"


def _mango(
    state_dir: Path,
    resources: Path,
    image: str,
    *args: str,
    stdin: bytes = b"",
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "MANGO_STATE_DIR": str(state_dir),
        "MANGO_SANDBOX": "docker",
        "MANGO_SANDBOX_IMAGE": image,
        "MANGO_SANDBOX_RESOURCE_DIR": str(resources),
        "MANGO_SANDBOX_PULL": "0",
        "MANGO_NAMESPACE": NAMESPACE,
        # Stop the embedded PostgreSQL with each command: the directory is removed afterwards.
        "MANGO_EMBEDDED_IDLE_SECONDS": "0",
        **(extra or {}),
    }
    env.pop("MANGO_DATABASE_URL", None)
    env.pop("MANGO_TEMPORAL_ADDRESS", None)
    return subprocess.run(
        [str(MANGO), *args], input=stdin, capture_output=True, env=env, timeout=180, check=False
    )


async def test_mango_exec_runs_in_a_docker_sandbox(
    docker_engine: Engine, test_image: str, state_dir: Path, tmp_path: Path
) -> None:
    """exec, files and sessions delete work end to end with MANGO_SANDBOX=docker."""
    session = f"cli-{tmp_path.name}"
    resources = tmp_path / "resources"
    name = Ownership("docker", NAMESPACE).name(session)
    try:
        first = _mango(
            state_dir,
            resources,
            test_image,
            "exec",
            "--session",
            session,
            "--",
            "sh",
            "-c",
            "echo hello > note.txt; echo hi",
        )
        assert first.returncode == 0, first.stderr.decode()
        assert first.stdout == b"hi\n"
        inspect = await docker_engine.inspect_container(name)
        assert inspect is not None
        assert inspect["State"]["Running"]
        again = _mango(
            state_dir, resources, test_image, "exec", "--session", session, "--", "cat", "note.txt"
        )
        assert (again.returncode, again.stdout) == (0, b"hello\n")
        failing = _mango(
            state_dir,
            resources,
            test_image,
            "exec",
            "--session",
            session,
            "--",
            "sh",
            "-c",
            "exit 3",
        )
        assert failing.returncode == 3
        read = _mango(
            state_dir, resources, test_image, "files", "read", "--session", session, "note.txt"
        )
        assert read.stdout == b"hello\n"
        deleted = _mango(state_dir, resources, test_image, "sessions", "delete", session)
        assert deleted.returncode == 0, deleted.stderr.decode()
        assert await docker_engine.inspect_container(name) is None
    finally:
        leftover = await docker_engine.inspect_container(name)
        if leftover is not None:
            await docker_engine.remove_container(str(leftover["Id"]))


def test_doctor_reports_an_unreachable_docker_daemon(state_dir: Path, tmp_path: Path) -> None:
    """With DOCKER_HOST pointing nowhere, doctor's provider check fails (a real round trip)."""
    result = _mango(
        state_dir,
        tmp_path / "resources",
        "unused:latest",
        "doctor",
        "--json",
        extra={"DOCKER_HOST": "unix:///nonexistent"},
    )
    assert result.returncode == 2
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["database"]["ok"] is True
    assert checks["provider docker"]["ok"] is False
    assert "unreachable" in checks["provider docker"]["detail"]


def test_doctor_reports_a_reachable_docker_daemon(state_dir: Path, tmp_path: Path) -> None:
    """With the daemon up, doctor's provider check names the Engine it reached."""
    result = _mango(state_dir, tmp_path / "resources", "unused:latest", "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["provider docker"]["ok"] is True, checks["provider docker"]
    assert "Docker Engine" in checks["provider docker"]["detail"]
    assert f"namespace {NAMESPACE}" in checks["provider docker"]["detail"]
