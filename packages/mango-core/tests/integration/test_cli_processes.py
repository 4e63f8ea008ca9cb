"""``mango processes``: a process started by one ``mango`` process, reached by later ones.

Every call is its own ``mango`` process, which is what a worker restart is:
nothing of the starting process is left but what the provider recorded.
Real PostgreSQL, the local provider.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))
BOUND = 20.0


@pytest.fixture
def run(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run ``mango ARGS`` with its own state dir and the test's database."""
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("MANGO_", "DOCKER_"))
    }
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )

    def invoke(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [MANGO, *args], capture_output=True, env=env, timeout=120, check=False
        )

    return invoke


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (not zombie) host process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_process_started_by_one_mango_is_listed_logged_and_killed_by_others(run) -> None:  # type: ignore[no-untyped-def]
    """start, ls, logs --since, wait --timeout, kill, logs --follow: each its own process."""
    started = run(
        "processes", "start", "--session", "bg", "--", "sh", "-c", "printf 'one\\ntwo\\n'; exec cat"
    )
    assert started.returncode == 0, started.stderr
    process_id = started.stdout.decode().strip()
    listed = run("processes", "ls", "--session", "bg", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["id"], row["state"], row["argv"][:2]) == (process_id, "running", ["sh", "-c"])
    assert alive(row["pid"])
    deadline = time.monotonic() + BOUND
    while (logs := run("processes", "logs", "--session", "bg", process_id)).stdout != b"one\ntwo\n":
        assert logs.returncode == 0, logs.stderr
        assert time.monotonic() < deadline, f"the log is still {logs.stdout!r}"
    tail = run("processes", "logs", "--session", "bg", "--since", "4", process_id)
    assert (tail.returncode, tail.stdout) == (0, b"two\n")
    waited = run("processes", "wait", "--session", "bg", "--timeout", "0.2", process_id)
    assert (waited.returncode, waited.stdout) == (124, f"{process_id} running\n".encode())
    killed = run("processes", "kill", "--session", "bg", process_id)
    assert (killed.returncode, killed.stdout) == (0, f"{process_id} killed\n".encode())
    assert not alive(row["pid"])
    followed = run("processes", "logs", "--session", "bg", "--follow", process_id)
    assert (followed.returncode, followed.stdout) == (0, b"one\ntwo\n")
    ended = run("processes", "wait", "--session", "bg", process_id)
    assert (ended.returncode, ended.stdout) == (137, f"{process_id} killed -9\n".encode())


def test_exit_codes_unknown_ids_and_deletion(run) -> None:  # type: ignore[no-untyped-def]
    """wait passes the exit code on; an unknown id is error/hint; deleting kills the rest."""
    exiting = run("processes", "start", "--session", "codes", "--", "sh", "-c", "exit 3")
    process_id = exiting.stdout.decode().strip()
    waited = run("processes", "wait", "--session", "codes", process_id)
    assert (waited.returncode, waited.stdout) == (3, f"{process_id} exited 3\n".encode())
    unknown = run("processes", "logs", "--session", "codes", "p-0-00000000")
    assert (unknown.returncode, unknown.stderr.decode().splitlines()) == (
        2,
        [
            "error: no background process 'p-0-00000000' in this sandbox",
            "hint: list the Session's processes with 'mango processes ls --session ID'",
        ],
    )
    nobody = run("processes", "ls", "--session", "never-made")
    assert nobody.returncode == 2
    assert nobody.stderr.startswith(b"error: no session 'never-made' with a sandbox\nhint: ")
    running = run("processes", "start", "--session", "codes", "--", "cat")
    assert running.returncode == 0, running.stderr
    [_, row] = json.loads(run("processes", "ls", "--session", "codes", "--json").stdout)
    assert alive(row["pid"])
    deleted = run("sessions", "delete", "codes")
    assert deleted.returncode == 0, deleted.stderr
    assert not alive(row["pid"])
