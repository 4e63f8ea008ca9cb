"""The embedded PostgreSQL between commands: lingering, the reaper, ``mango embedded``."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from mango.domain import ProviderUnavailable
from mango.embedded import EmbeddedPostgres
from mango.embedded._host import is_process_alive

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))


def wait_until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit:g} s"
        time.sleep(0.05)


def stop_everything(data_dir: Path) -> None:
    """Stop the server and the reaper of ``data_dir``, whatever a test left."""
    with contextlib.suppress(ProviderUnavailable):
        EmbeddedPostgres(data_dir).shutdown()
    reaper = EmbeddedPostgres(data_dir).status().reaper_pid
    if reaper is not None:
        os.kill(reaper, signal.SIGKILL)


@pytest.fixture
def server_dir(embedded_data_dir: Path) -> Iterator[Path]:
    """A fresh data directory whose server and reaper are stopped after the test."""
    yield embedded_data_dir
    stop_everything(embedded_data_dir)


def test_a_lingering_handle_leaves_the_server_for_the_next(server_dir: Path) -> None:
    """The last lingering handle leaves the server up; the next joins it; shutdown ends it."""
    first = EmbeddedPostgres(server_dir, idle_seconds=600)
    url = first.start()
    first.stop()
    status = first.status()
    assert status.running
    assert not status.in_use
    assert status.reaper_pid is not None
    assert is_process_alive(status.reaper_pid)
    with psycopg.connect(url) as conn:  # nobody holds it, and it still answers
        assert conn.execute("SELECT 1").fetchone() == (1,)

    second = EmbeddedPostgres(server_dir, idle_seconds=600)
    assert second.start() == url
    assert second.status().pid == status.pid
    assert second.status().in_use
    with pytest.raises(ProviderUnavailable, match="in use"):
        EmbeddedPostgres(server_dir).shutdown()
    assert second.status().running
    assert second.status().reaper_pid == status.reaper_pid  # refused: the reaper stays
    second.stop()

    assert EmbeddedPostgres(server_dir).shutdown() is True
    after = EmbeddedPostgres(server_dir).status()
    assert (after.running, after.pid) == (False, None)
    wait_until(lambda: not is_process_alive(status.reaper_pid or 0), "the reaper's exit")
    # Whichever process holds the reaper's lock lets it go (a refused shutdown used to end the
    # first reaper, and the next stop started another: this waited for the wrong one).
    wait_until(
        lambda: EmbeddedPostgres(server_dir).status().reaper_pid is None,
        "the reaper's lock released",
    )
    assert EmbeddedPostgres(server_dir).shutdown() is False


def test_the_reaper_stops_an_idle_server(server_dir: Path) -> None:
    """Once unused for the idle period, the server is stopped by the reaper, which then exits."""
    handle = EmbeddedPostgres(server_dir, idle_seconds=0.5)
    handle.start()
    handle.stop()
    reaper = handle.status().reaper_pid
    assert reaper is not None
    wait_until(lambda: not handle.status().running, "the idle server's stop")
    wait_until(lambda: not is_process_alive(reaper), "the reaper's exit")
    assert not (server_dir / "postmaster.pid").exists()


def test_a_held_server_is_never_reaped(server_dir: Path) -> None:
    """While a handle holds the server, the reaper's step leaves it running and asks again later."""
    holder = EmbeddedPostgres(server_dir)  # a worker: holds it, never lingers
    holder.start()
    try:
        long_ago = time.time() - 3600
        os.utime(server_dir.with_name("pgdata.holders"), (long_ago, long_ago))
        assert EmbeddedPostgres(server_dir, idle_seconds=1).stop_if_idle() == 1
        assert holder.status().running
    finally:
        holder.stop()
    assert not holder.status().running  # the non-lingering last handle stopped it


def _environ(state: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MANGO_")}
    env.update(MANGO_STATE_DIR=str(state), MANGO_DISABLE_PLUGINS="1", **extra)
    return env


def _mango(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([MANGO, *args], env=env, capture_output=True, timeout=180, check=False)


@pytest.fixture
def state(embedded_data_dir: Path) -> Iterator[Path]:
    """A state directory for the CLI (its server is stopped after the test)."""
    root = embedded_data_dir.parent / "state"
    yield root
    stop_everything(root / "postgres")


@pytest.mark.slow
def test_commands_share_the_server_and_embedded_stop_ends_it(state: Path) -> None:
    """Two commands use one server process; 'mango embedded stop' stops it and its reaper."""
    env = _environ(state)
    first = _mango(env, "exec", "--session", "s", "--", "true")
    assert first.returncode == 0, first.stderr
    status = json.loads(_mango(env, "embedded", "status", "--json").stdout)
    assert (status["running"], status["in_use"]) == (True, False)
    assert status["reaper_pid"] is not None
    second = _mango(env, "exec", "--session", "s", "--", "echo", "again")
    assert (second.returncode, second.stdout) == (0, b"again\n")
    assert json.loads(_mango(env, "embedded", "status", "--json").stdout)["pid"] == status["pid"]

    stopped = _mango(env, "embedded", "stop")
    assert (stopped.returncode, stopped.stdout) == (0, b"stopped\n")
    wait_until(lambda: not is_process_alive(status["reaper_pid"]), "the reaper's exit")
    assert json.loads(_mango(env, "embedded", "status", "--json").stdout)["running"] is False
    assert _mango(env, "embedded", "stop").stdout == b"not running\n"


def test_idle_zero_stops_the_server_with_the_command(state: Path) -> None:
    """MANGO_EMBEDDED_IDLE_SECONDS=0 restores stop-on-exit: nothing is left running."""
    env = _environ(state, MANGO_EMBEDDED_IDLE_SECONDS="0")
    assert _mango(env, "exec", "--session", "s", "--", "true").returncode == 0
    status = json.loads(_mango(env, "embedded", "status", "--json").stdout)
    assert (status["running"], status["reaper_pid"]) == (False, None)


@pytest.mark.slow
def test_a_killed_command_leaves_no_server_behind(state: Path, tmp_path: Path) -> None:
    """SIGKILL during a command: the reaper started with the server still stops it once idle."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = _environ(state, MANGO_EMBEDDED_IDLE_SECONDS="0.5")
    script = 'printf ready; read -r _ < "$1"'
    server = EmbeddedPostgres(state / "postgres")
    with subprocess.Popen(
        [MANGO, "exec", "--session", "k", "--", "sh", "-c", script, "sh", str(gate)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as process:
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, "the command did not start"
            assert os.read(process.stdout.fileno(), 5) == b"ready"
            assert server.status().in_use
            process.kill()
            process.wait(timeout=60)
        finally:
            process.kill()
            # The orphaned command (SIGKILL gives mango no chance to kill it) ends at the gate.
            with gate.open("w") as writer:
                writer.write("go\n")
    wait_until(lambda: not server.status().running, "the stop of the abandoned server")


_NO_REAPER = """
import sys
from pathlib import Path
from mango.embedded import EmbeddedPostgres

sys.executable = "/nonexistent/python"  # no reaper can be started from here
server = EmbeddedPostgres(Path(sys.argv[1]), idle_seconds=600)
server.start()
server.stop()
status = server.status()
print(status.running, status.reaper_pid)
"""


def test_without_a_reaper_the_last_handle_stops_the_server(server_dir: Path) -> None:
    """If no reaper can be started, lingering would mean running for ever: the server stops."""
    done = subprocess.run(
        [sys.executable, "-c", _NO_REAPER, str(server_dir)],
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, b"False None\n"), done.stderr
