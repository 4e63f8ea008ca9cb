"""The embedded PostgreSQL: start, stop, reuse, crash recovery and concurrent starters."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import psycopg
import pytest

from mango.domain import ConfigurationError
from mango.embedded import EmbeddedPostgres, embedded_postgres
from mango.embedded._host import is_server_of

pytestmark = pytest.mark.postgres

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="exercises the run-as-root path")


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def system_identifier(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
    assert row is not None
    return int(row[0])


async def test_restart_reuses_the_cluster_and_its_data(embedded_data_dir: Path) -> None:
    """A second start finds the first one's cluster, port and rows; each stop stops."""
    async with embedded_postgres(embedded_data_dir) as url:
        assert url.startswith("postgresql://postgres:")
        assert url.endswith("@127.0.0.1:" + url.rsplit(":", 1)[1])
        assert url.endswith("/mango")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("CREATE TABLE kept (value text)")
            await conn.execute("INSERT INTO kept VALUES ('from the first run')")
        identifier = system_identifier(url)
    assert not (embedded_data_dir / "postmaster.pid").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()

    async with embedded_postgres(embedded_data_dir) as again:
        assert url == again
        assert identifier == system_identifier(again)
        async with await psycopg.AsyncConnection.connect(again) as conn:
            cursor = await conn.execute("SELECT value FROM kept")
            assert await cursor.fetchall() == [("from the first run",)]
    assert not (embedded_data_dir / "postmaster.pid").exists()


def test_second_handle_joins_the_running_server(embedded_data_dir: Path) -> None:
    """A handle on a running server connects to it; the last handle to stop stops it."""
    first = EmbeddedPostgres(embedded_data_dir)
    url = first.start()
    pid = postmaster_pid(embedded_data_dir)
    try:
        with EmbeddedPostgres(embedded_data_dir) as joined:
            assert url == joined
            assert pid == postmaster_pid(embedded_data_dir)
        with psycopg.connect(url) as conn:  # still up for the first handle
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        first.stop()
    assert not (embedded_data_dir / "postmaster.pid").exists()


def test_recovers_from_a_killed_server(
    embedded_data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After SIGKILL leaves a stale postmaster.pid, the next start recovers committed data."""
    caplog.set_level(logging.WARNING, logger="mango.embedded")
    first = EmbeddedPostgres(embedded_data_dir)
    url = first.start()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE survived (n integer)")
            conn.execute("INSERT INTO survived VALUES (42)")
        killed = postmaster_pid(embedded_data_dir)
        os.kill(killed, signal.SIGKILL)
        # SIGKILL is delivered, not awaited: under load the process can still
        # look like the server for a moment. Wait (bounded) until it does not.
        deadline = time.monotonic() + 30
        while is_server_of(killed, embedded_data_dir):
            assert time.monotonic() < deadline, f"postmaster {killed} survived SIGKILL"
            time.sleep(0.01)

        with EmbeddedPostgres(embedded_data_dir) as recovered:
            assert f"removing stale {embedded_data_dir}/postmaster.pid" in caplog.text
            assert killed != postmaster_pid(embedded_data_dir)
            with psycopg.connect(recovered) as conn:
                assert conn.execute("SELECT n FROM survived").fetchone() == (42,)
    finally:
        first.stop()
    assert not (embedded_data_dir / "postmaster.pid").exists()


def test_pid_file_of_an_unrelated_live_process_is_stale(embedded_data_dir: Path) -> None:
    """A postmaster.pid naming a live process that is not its server (pid reuse) is cleared."""
    with EmbeddedPostgres(embedded_data_dir):
        pass
    lines = ["", str(embedded_data_dir), "0", "5432", "", "127.0.0.1", "0 0", "ready"]
    lines[0] = str(os.getpid())  # alive, but pytest is no postmaster
    (embedded_data_dir / "postmaster.pid").write_text("\n".join(lines) + "\n")
    with EmbeddedPostgres(embedded_data_dir) as url, psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert postmaster_pid(embedded_data_dir) != os.getpid()


async def test_cancelled_start_leaves_no_server(embedded_data_dir: Path) -> None:
    """Cancelling a task that is starting the server waits for the start, then stops it."""
    started = asyncio.Event()

    async def use_server() -> None:
        started.set()
        async with embedded_postgres(embedded_data_dir):
            await asyncio.Event().wait()  # held until cancelled

    task = asyncio.create_task(use_server())
    await started.wait()
    await asyncio.sleep(0)  # let the task hand the blocking start to its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not (embedded_data_dir / "postmaster.pid").exists()


_STARTER = """
import json, sys
from pathlib import Path
import psycopg
from mango.embedded import EmbeddedPostgres

server = EmbeddedPostgres(Path(sys.argv[1]))
url = server.start()
with psycopg.connect(url) as conn:
    row = conn.execute(
        "SELECT system_identifier, pg_postmaster_start_time()::text FROM pg_control_system()"
    ).fetchone()
print(json.dumps({"url": url, "system": str(row[0]), "started": row[1]}), flush=True)
sys.stdin.read()  # hold the server until the test closes our stdin
server.stop()
"""


@pytest.mark.slow
async def test_concurrent_starters_initialise_and_start_once(embedded_data_dir: Path) -> None:
    """Four processes starting one fresh cluster share one initdb and one server."""
    starters = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _STARTER,
            str(embedded_data_dir),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    try:
        lines = await asyncio.wait_for(
            asyncio.gather(*(starter.stdout.readline() for starter in starters)),  # type: ignore[union-attr]
            timeout=120,
        )
        reports = [json.loads(line) for line in lines]
        assert len({json.dumps(report, sort_keys=True) for report in reports}) == 1
    finally:
        for starter in starters:
            starter.stdin.close()  # type: ignore[union-attr]
        codes = await asyncio.wait_for(
            asyncio.gather(*(starter.wait() for starter in starters)), timeout=120
        )
    assert codes == [0, 0, 0, 0]
    assert not (embedded_data_dir / "postmaster.pid").exists()


def test_refuses_a_directory_that_is_not_a_cluster(embedded_data_dir: Path) -> None:
    """Unrelated files are never overwritten by initdb."""
    embedded_data_dir.mkdir()
    (embedded_data_dir / "notes.txt").write_text("mine")
    with pytest.raises(ConfigurationError, match="not a PostgreSQL data directory"):
        EmbeddedPostgres(embedded_data_dir).start()
    assert (embedded_data_dir / "notes.txt").read_text() == "mine"


def test_lost_credentials_are_a_configuration_error(embedded_data_dir: Path) -> None:
    """Without the credentials file the cluster's password is unknown: say so."""
    with EmbeddedPostgres(embedded_data_dir):
        pass
    embedded_data_dir.with_name("pgdata.credentials.json").unlink()
    with pytest.raises(ConfigurationError, match="password"):
        EmbeddedPostgres(embedded_data_dir).start()


@root_only
def test_runs_as_an_unprivileged_account_when_root(embedded_data_dir: Path) -> None:
    """As root, the cluster and the server belong to a non-root account."""
    with EmbeddedPostgres(embedded_data_dir):
        assert embedded_data_dir.stat().st_uid != 0
        assert Path(f"/proc/{postmaster_pid(embedded_data_dir)}").stat().st_uid != 0
        credentials = embedded_data_dir.with_name("pgdata.credentials.json")
        assert (credentials.stat().st_uid, credentials.stat().st_mode & 0o777) == (0, 0o600)


@root_only
def test_unreachable_directory_as_root_is_a_configuration_error(
    embedded_data_dir: Path,
) -> None:
    """A data directory the server account cannot reach is named, and nothing is created."""
    hidden = embedded_data_dir.parent / "hidden"
    hidden.mkdir(mode=0o700)
    with pytest.raises(ConfigurationError, match="not searchable") as caught:
        EmbeddedPostgres(hidden / "state" / "pgdata").start()
    assert f"{hidden} is not searchable" in str(caught.value)
    assert caught.value.hint is not None
    assert "MANGO_STATE_DIR" in caught.value.hint
    assert not (hidden / "state").exists()


@root_only
def test_root_is_refused_as_the_server_account(
    embedded_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MANGO_POSTGRES_USER cannot name root."""
    monkeypatch.setenv("MANGO_POSTGRES_USER", "root")
    with pytest.raises(ConfigurationError, match="uid 0"):
        EmbeddedPostgres(embedded_data_dir).start()


def test_staged_binaries_run_and_are_reused(tmp_path: Path) -> None:
    """The world-readable copy of the server tree runs, keeps its libraries, and is made once."""
    import subprocess

    from mango.embedded._cluster import find_binaries, stage_binaries

    staged = stage_binaries(find_binaries(), tmp_path / ".pginstall")
    assert staged != find_binaries()
    for tool in ("postgres", "initdb", "pg_ctl"):
        completed = subprocess.run(
            [str(staged / tool), "--version"], capture_output=True, text=True, check=False
        )
        assert completed.returncode == 0, completed.stderr
        assert "PostgreSQL" in completed.stdout
    assert (staged.stat().st_mode & 0o777) == 0o755
    marker = staged / "postgres"
    before = marker.stat().st_ino
    assert stage_binaries(find_binaries(), tmp_path / ".pginstall") == staged
    assert marker.stat().st_ino == before
    assert not list((tmp_path / ".pginstall").glob(".*.tmp"))
