"""The worker's Prometheus endpoint, scraped after a workload: the figures match what happened."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import urllib.request
from collections.abc import Callable

import pytest
from temporalio.client import Client

from mango.postgres import PostgresBindingStore
from mango.temporal import cleanup_workflow_id, session_workflow_id
from mango.temporal.schedules import eviction_schedule_id

from .support import MANGO, Harness, WorkerEnv, WorkerProcess, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a 127.0.0.1 URL
        return response.read().decode()


def _value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    total, seen = 0.0, False
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match["value"])
            seen = True
    names = sorted(
        {
            m["name"]
            for m in map(_SAMPLE.match, text.splitlines())
            if m and m["name"].startswith(name.split("_", maxsplit=1)[0])
        }
    )
    assert seen, f"no sample {name} {labels}; samples named {names}"
    return total


async def _attempts(client: Client, *workflow_ids: str) -> dict[str, tuple[int, int]]:
    """Per activity type in these workflows' histories: (activities, attempts they took).

    An activity's started event is written when its last attempt ends and carries
    that attempt's number, so the attempts are the sum of those numbers.
    """
    scheduled: dict[int, str] = {}
    counts: dict[str, tuple[int, int]] = {}
    for workflow_id in workflow_ids:
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
            if event.HasField("activity_task_scheduled_event_attributes"):
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                scheduled[event.event_id] = name
            elif event.HasField("activity_task_started_event_attributes"):
                started = event.activity_task_started_event_attributes
                name = scheduled[started.scheduled_event_id]
                activities, attempts = counts.get(name, (0, 0))
                counts[name] = (activities + 1, attempts + started.attempt)
    return counts


async def _mango(env: dict[str, str], *args: str) -> tuple[int, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        *MANGO, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out, err


async def test_scraped_figures_match_the_workload(
    harness: Harness, worker_env: WorkerEnv, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """Two execs (one truncated), one Session created and deleted: counters and counts agree."""
    port = _free_port()
    worker = spawn_worker(None, MANGO_METRICS_PORT=str(port), MANGO_MAX_OUTPUT_BYTES="8")
    await worker.wait_ready()
    url = f"http://127.0.0.1:{port}/metrics"
    assert f"metrics: {url}" in worker.text()
    env = worker_env.environ()
    session_id = harness.sid("metrics")

    code, out, err = await _mango(env, "exec", "--session", session_id, "--", "echo", "hi")
    assert (code, out) == (0, b"hi\n"), err
    code, out, err = await _mango(
        env, "exec", "--session", session_id, "--", "echo", "0123456789abcdef"
    )
    assert (code, out) == (0, b"01234567"), err
    code, _, err = await _mango(env, "sessions", "delete", session_id)
    assert code == 0, err

    received = "temporal_activity_task_received_total"
    latency = "temporal_activity_execution_latency_milliseconds_count"
    # temporalio's own figures: one per activity attempt, by type, exactly. Two execs and one
    # release, each once unless the server retried it (a loaded CI machine once ran an exec
    # attempt twice): the histories (complete, the commands have returned) say how many.
    attempts = await _attempts(
        harness.client, session_workflow_id(session_id), cleanup_workflow_id(session_id)
    )
    assert (attempts["ExecCommand"][0], attempts["ReleaseSandbox"][0]) == (2, 1)
    expected = {
        (name, activity_type): float(attempts[activity_type][1])
        for name in (received, latency)
        for activity_type in ("ExecCommand", "ReleaseSandbox")
    }

    def temporal_figures(text: str) -> dict[tuple[str, str], float | None]:
        figures: dict[tuple[str, str], float | None] = {}
        for name, activity_type in expected:
            try:
                figures[name, activity_type] = _value(text, name, activity_type=activity_type)
            except AssertionError:  # no sample yet
                figures[name, activity_type] = None
        return figures

    # Temporal's Core metrics reach the exporter through a buffer drained every second, so
    # the updates of the last activity may land a drain later: wait (bounded) until they are
    # all there, and exact; mango's own figures are recorded before the commands return.
    text = ""

    async def complete() -> bool:
        nonlocal text
        text = await asyncio.to_thread(_scrape, url)
        return temporal_figures(text) == expected

    await wait_until(
        complete,
        60,
        "Temporal's activity figures to match the histories",
        detail=lambda: (
            f"scraped {temporal_figures(text)}\nexpected {expected}\n"
            f"attempts in the histories: {attempts}\n{worker.text()[-3000:]}"
        ),
    )
    figures = temporal_figures(text)
    assert figures == expected, f"attempts in the histories: {attempts}\n{worker.text()[-3000:]}"
    local = {"provider": "local"}
    assert _value(text, "mango_sandboxes_created_total", **local) == 1
    assert _value(text, "mango_sandboxes_destroyed_total", **local) == 1
    assert _value(text, "mango_exec_truncations_total", stream="stdout", **local) == 1
    exec_count = "mango_provider_duration_seconds_count"
    assert _value(text, exec_count, operation="exec", outcome="ok", **local) == 2
    assert _value(text, exec_count, operation="create", outcome="ok", **local) == 1
    assert _value(text, exec_count, operation="destroy", outcome="ok", **local) == 1
    effect = "mango_lifecycle_effect_duration_seconds_count"
    assert _value(text, effect, effect="setup-resource", **local) == 1
    assert _value(text, effect, effect="publish-binding", **local) == 1
    worker.stop()
    assert worker.process.returncode == 0, worker.text()


async def test_an_idle_eviction_is_counted(
    harness: Harness, worker_env: WorkerEnv, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """The worker's eviction run: one sandbox evicted, counted once, its destroy timed once."""
    store = harness.store
    assert isinstance(store, PostgresBindingStore)
    port = _free_port()
    worker = spawn_worker(None, MANGO_METRICS_PORT=str(port), MANGO_EVICT_IDLE_AFTER="1h")
    await worker.wait_ready()
    url = f"http://127.0.0.1:{port}/metrics"
    session_id = harness.sid("idle")
    code, _, err = await _mango(worker_env.environ(), "exec", "--session", session_id, "--", "true")
    assert code == 0, err
    async with store.pool.connection() as conn:  # unused for two hours, without waiting for it
        await conn.execute(
            "UPDATE mango_sandbox_bindings SET last_used_at = last_used_at - interval '2 hours'"
            " WHERE session_id = %s",
            (session_id,),
        )
    schedule = harness.client.get_schedule_handle(
        eviction_schedule_id(f"{harness.queue_prefix}-local")
    )
    await schedule.trigger()

    async def finished() -> bool:
        binding = await store.get_binding(session_id)
        return binding is not None and binding.eviction is not None and binding.eviction.finished

    await wait_until(finished, 60, "the eviction run to destroy the idle sandbox")
    text = ""

    async def counted() -> bool:  # the counter follows the destroy's commit in the worker
        nonlocal text
        text = await asyncio.to_thread(_scrape, url)
        return "mango_sandboxes_evicted_total{" in text

    await wait_until(counted, 30, "mango_sandboxes_evicted_total on the endpoint")
    local = {"provider": "local"}
    assert _value(text, "mango_sandboxes_evicted_total", **local) == 1
    effect = "mango_lifecycle_effect_duration_seconds_count"
    assert _value(text, effect, effect="mark-evicted", **local) == 1
    assert _value(text, effect, effect="destroy-evicted", **local) == 1
    worker.stop()
    assert worker.process.returncode == 0, worker.text()


def test_metrics_settings(tmp_path: object) -> None:
    """MANGO_METRICS_PORT is a port; MANGO_TELEMETRY_SESSION_IDS is 0 or 1."""
    from mango.config import Settings
    from mango.domain import ConfigurationError

    base = {"MANGO_STATE_DIR": "/tmp/mango-unused"}
    plain = Settings.from_env(base)
    assert (plain.metrics_port, plain.metrics_host, plain.telemetry_session_ids) == (
        None,
        "127.0.0.1",
        False,
    )
    on = Settings.from_env(
        {**base, "MANGO_METRICS_PORT": "9464", "MANGO_TELEMETRY_SESSION_IDS": "1"}
    )
    assert (on.metrics_port, on.telemetry_session_ids) == (9464, True)
    for name, value in (("MANGO_METRICS_PORT", "0"), ("MANGO_TELEMETRY_SESSION_IDS", "yes")):
        with pytest.raises(ConfigurationError, match=name):
            Settings.from_env({**base, name: value})
