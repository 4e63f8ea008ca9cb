"""``MANGO_SANDBOX=docker mango exec``: the installed plugin behind the real command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.domain.hashing import session_key_hash
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


def _mango(
    state_dir: Path, resources: Path, image: str, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "MANGO_STATE_DIR": str(state_dir),
        "MANGO_SANDBOX": "docker",
        "MANGO_SANDBOX_IMAGE": image,
        "MANGO_SANDBOX_RESOURCE_DIR": str(resources),
        "MANGO_SANDBOX_PULL": "0",
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
    name = f"mango-{session_key_hash(session)}"
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
