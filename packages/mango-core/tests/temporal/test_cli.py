"""``mango worker``, ``--via-temporal`` and the doctor's Temporal checks."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from temporalio.service import RPCError

from mango.cli import cli
from mango.cli.doctor import temporal_checks
from mango.config import Settings
from mango.domain import ConfigurationError, SandboxSpec, spec_hash
from mango.domain.values import ProvisioningIntent
from mango.local import LocalProvider
from mango.temporal import session_workflow_id
from mango.temporal.faults import FaultPoint, fault_point_from_env, inject_faults

from .support import MANGO, Harness, WorkerEnv, WorkerProcess, session_dirs, wait_until


def test_worker_refuses_an_unknown_provider() -> None:
    """An unknown MANGO_SANDBOX stops the worker before anything starts, listing what exists."""
    result = CliRunner().invoke(
        cli, ["worker"], env={"MANGO_SANDBOX": "nosuch", "MANGO_DISABLE_PLUGINS": "1"}
    )
    assert result.exit_code == 2
    assert "unknown sandbox provider 'nosuch' (installed: local)" in result.output


def test_a_stale_ready_file_is_removed_before_anything_starts(tmp_path: Path) -> None:
    """A ready file left by an earlier worker is gone even if this one cannot start."""
    ready = tmp_path / "ready"
    ready.write_text("12345\n")
    result = CliRunner().invoke(
        cli,
        ["worker", "--ready-file", str(ready)],
        env={"MANGO_SANDBOX": "nosuch", "MANGO_DISABLE_PLUGINS": "1"},
    )
    assert result.exit_code == 2
    assert not ready.exists()


def test_fault_injection_is_inert_unless_configured(tmp_path: Path) -> None:
    """Unset, nothing is wrapped; set, only the known points are accepted."""
    provider, store = LocalProvider(tmp_path), object()
    assert fault_point_from_env({}) is None
    assert inject_faults(provider, store, None) == (provider, store)  # type: ignore[arg-type]
    assert fault_point_from_env({"MANGO_FAULT_POINT": "after-create"}) is FaultPoint.AFTER_CREATE
    with pytest.raises(ConfigurationError, match="after-intent, after-create"):
        fault_point_from_env({"MANGO_FAULT_POINT": "sometime"})


def test_settings_validate_temporal_variables(tmp_path: Path) -> None:
    """Address, namespace and task-queue prefix come from the environment, validated."""
    settings = Settings.from_env(
        {
            "MANGO_STATE_DIR": str(tmp_path),
            "MANGO_TEMPORAL_ADDRESS": "temporal.example:7233",
            "MANGO_TEMPORAL_NAMESPACE": "prod",
            "MANGO_TEMPORAL_TASK_QUEUE_PREFIX": "blue",
        }
    )
    assert (settings.temporal_address, settings.temporal_namespace, settings.task_queue_prefix) == (
        "temporal.example:7233",
        "prod",
        "blue",
    )
    for name, value in (
        ("MANGO_TEMPORAL_ADDRESS", "http://x:1"),
        ("MANGO_TEMPORAL_TASK_QUEUE_PREFIX", "bad prefix"),
    ):
        with pytest.raises(ConfigurationError, match=name):
            Settings.from_env({"MANGO_STATE_DIR": str(tmp_path), name: value})


async def mango(env: dict[str, str], *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """Run the ``mango`` command; return its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        *MANGO,
        *args,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 120)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.temporal
@pytest.mark.postgres
@pytest.mark.slow
async def test_commands_travel_the_durable_path(
    harness: Harness, worker_env: WorkerEnv, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """exec and sessions delete go through a worker when MANGO_TEMPORAL_ADDRESS is set."""
    worker = spawn_worker()
    await worker.wait_ready()
    env = worker_env.environ()
    session_id = harness.sid("cli")

    code, out, err = await mango(
        env,
        "exec",
        "--session",
        session_id,
        "--stdin",
        "--",
        "sh",
        "-c",
        "od -An -tx1; exit 3",
        stdin=b"\x00\xff\n",
    )
    assert (code, out.split()) == (3, ["00", "ff", "0a"]), err
    description = await harness.client.get_workflow_handle(
        session_workflow_id(session_id)
    ).describe()
    assert description.task_queue == f"{harness.queue_prefix}-local"

    # SIGTERM while the step runs: the step is cancelled and its command killed first.
    pidfile = worker_env.state_dir.parent / "durable.pid"
    process = await asyncio.create_subprocess_exec(
        *MANGO,
        "exec",
        "--session",
        session_id,
        "--",
        "sh",
        "-c",
        f'echo $$ > "{pidfile}"; exec sleep 300',
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    async def started() -> bool:
        return pidfile.exists() and pidfile.read_text().strip().isdigit()

    await wait_until(started, 60, "the durable command to start")
    pid = int(pidfile.read_text())
    process.terminate()
    _, err_bytes = await asyncio.wait_for(process.communicate(), 120)
    assert (process.returncode, err_bytes) == (143, b"error: terminated\n")
    assert not _alive(pid)  # checked at once: gone before mango exited

    direct = harness.sid("direct")
    code, out, _ = await mango(env, "exec", "--direct", "--session", direct, "--", "echo", "hi")
    assert (code, out) == (0, "hi\n")
    with pytest.raises(RPCError):
        await harness.client.get_workflow_handle(session_workflow_id(direct)).describe()

    checks = await temporal_checks(Settings.from_env(env))
    assert [(c.name, c.ok) for c in checks] == [
        ("temporal", True),
        (f"worker {harness.queue_prefix}-local", True),
    ]
    assert "provider local base directory" in checks[1].detail

    code, out, err = await mango(env, "sessions", "delete", session_id, direct, "--json")
    assert code == 0, err
    assert '"deleted": true' in out
    assert session_dirs(worker_env.sandbox_dir) == []

    worker.stop()
    assert worker.process.returncode == 0, worker.text()
    assert "worker stopped" in worker.text()
    missing = await temporal_checks(Settings.from_env(env), timeout=5)
    assert (missing[1].ok, missing[1].hint) == (
        False,
        "start one: MANGO_SANDBOX=local mango worker",
    )


@pytest.mark.temporal
@pytest.mark.postgres
async def test_the_ready_file_says_a_worker_polls(
    harness: Harness,
    worker_env: WorkerEnv,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    """--ready-file appears once the worker polls (a step then runs at once), holding the
    worker's pid, and is gone when it stops: what the README's Temporal example waits for."""
    ready = tmp_path / "ready"
    worker = spawn_worker(None, "--ready-file", str(ready))

    async def appeared() -> bool:
        if worker.process.poll() is not None:
            pytest.fail(f"worker exited with {worker.process.returncode}:\n{worker.text()}")
        return ready.exists()

    await wait_until(appeared, 60, "the ready file")
    assert ready.read_text() == f"{worker.process.pid}\n"
    assert "mango worker ready" in worker.text()
    code, out, err = await mango(
        worker_env.environ(), "exec", "--session", harness.sid("ready"), "--", "echo", "hi"
    )
    assert (code, out) == (0, "hi\n"), err
    worker.stop()
    assert worker.process.returncode == 0, worker.text()
    assert not ready.exists()


@pytest.mark.temporal
@pytest.mark.postgres
async def test_a_worker_brings_its_embedded_server_back(
    harness: Harness,
    worker_env: WorkerEnv,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    """SIGKILL of the embedded Temporal server under a worker: the worker starts it again
    and polls it, so a --via-temporal step runs (it polled the dead address for ever)."""
    import json
    import signal

    from mango.temporal import connect
    from mango.temporal.client import active_pollers

    own = {"MANGO_STATE_DIR": str(tmp_path / "own-state"), "MANGO_TEMPORAL_ADDRESS": ""}
    env = worker_env.environ(**own)
    ready = tmp_path / "ready"
    worker = spawn_worker(None, "--ready-file", str(ready), **own)
    process = worker.process
    try:

        async def is_ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"worker exited with {process.returncode}:\n{worker.text()}")
            return ready.exists()

        await wait_until(is_ready, 120, "the worker")
        server_json = tmp_path / "own-state" / "temporal" / "server.json"
        first = json.loads(server_json.read_text())
        os.kill(first["pid"], signal.SIGKILL)

        async def polling_again() -> bool:
            try:
                current = json.loads(server_json.read_text())
            except (OSError, ValueError):
                return False
            if current["pid"] == first["pid"]:
                return False
            try:
                client = await connect(f"127.0.0.1:{current['port']}")
                return bool(await active_pollers(client, f"{harness.queue_prefix}-local"))
            except Exception:  # noqa: BLE001 - still starting
                return False

        await wait_until(
            polling_again,
            120,
            "the worker to poll a new server",
            detail=lambda: f"worker log (end):\n{worker.text()[-4000:]}",
        )
        code, out, err = await mango(
            env, "exec", "--via-temporal", "--session", harness.sid("revived"), "--", "echo", "hi"
        )
        assert (code, out) == (0, "hi\n"), (err, worker.text())
    finally:
        worker.stop()


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_doctor_fails_for_a_provider_sessions_use_without_a_worker(
    harness: Harness, worker_env: WorkerEnv, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """An intent of provider docker with only a local worker running: doctor names docker."""
    worker = spawn_worker()
    await worker.wait_ready()
    env = worker_env.environ()
    session = harness.sid("docker-intent")
    await harness.store.ensure_session(session)
    intent = ProvisioningIntent(
        session_id=session,
        provider="docker",
        spec=SandboxSpec(),
        spec_hash=spec_hash(SandboxSpec()),
    )
    await harness.store.put_intent(intent)
    try:
        code, out, err = await mango(env, "doctor")
        assert code == 2, out + err
        lines = out.splitlines()
        assert f"[ok  ] worker {harness.queue_prefix}-local: " in "\n".join(lines)
        failing = [line for line in lines if line.startswith("[FAIL]")]
        assert len(failing) == 1, out
        assert failing[0].startswith(
            f"[FAIL] worker {harness.queue_prefix}-docker: provider docker "
            "(sessions in the database use it): no worker for provider 'docker'"
        )
        assert "hint: start one: MANGO_SANDBOX=docker mango worker" in out
    finally:
        await harness.store.delete_intent(intent)
        await harness.store.fence_session(session)
        await harness.store.delete_session(session)
        worker.stop()
