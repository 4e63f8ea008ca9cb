"""A Temporal server that dies while a step runs: the client's verdict matches what happened.

The client reaches the step's outcome through the server. When the server
goes away mid-step, the step was already accepted: a worker finishes it once
the server is back. The client must then wait for it (and report its real
result), or, if the server stays away past ``max_wait``, say that the
outcome is unknown and the step may still run, never that it failed.

The client here is connected without the SDK's own retries, so the first
call that meets the dead server fails: what the client does next is mango's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RetryConfig

from mango.app import SessionManager
from mango.domain import BindingStore, Command, ProviderUnavailable
from mango.embedded.temporal import embedded_temporal, running_address
from mango.local import LocalProvider
from mango.temporal import MangoActivities, Orchestrator
from mango.temporal.client import connect
from mango.temporal.codec import converter_for
from mango.temporal.worker import serve

from .support import FAST_POLICY, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]


def _server_pid(state: Path) -> int:
    return int(json.loads((state / "temporal" / "server.json").read_text())["pid"])


@asynccontextmanager
async def _worker(
    client: Client, store: BindingStore, sandboxes: Path, prefix: str
) -> AsyncIterator[None]:
    activities = MangoActivities(
        SessionManager(LocalProvider(sandboxes), store),
        store,
        client,
        task_queue_prefix=prefix,
        heartbeat_interval=0.2,
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        serve(client, activities, stop=stop, graceful_shutdown=2.0, on_ready=ready.set)
    )
    ready_wait = asyncio.create_task(ready.wait())
    await asyncio.wait({task, ready_wait}, return_when=asyncio.FIRST_COMPLETED)
    ready_wait.cancel()
    if task.done():
        task.result()
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def _bare_client(address: str) -> Client:
    """A client without the SDK's retries: a dead server fails its first call."""
    return await Client.connect(
        address, data_converter=converter_for(()), retry_config=RetryConfig(max_retries=0)
    )


async def test_a_step_whose_server_restarts_returns_its_real_result(
    tmp_path: Path, store: BindingStore
) -> None:
    """SIGKILL of the server mid-step; it comes back (as a worker's embedded one does).

    The SDK's poll for the update's outcome rides over the restart by itself;
    this keeps it so (and that the step's result, not an error, comes back).
    """
    state, marks = tmp_path / "state", tmp_path / "marks"
    marks.mkdir()
    async with embedded_temporal(state, keep_alive=True) as address:
        worker_client = await connect(address)
        client = await _bare_client(address)
        orchestrator = Orchestrator(
            client, store, "local", task_queue_prefix="outage", policy=FAST_POLICY
        )
        script = (
            f'echo run >> "{marks}/runs"; touch "{marks}/started"; '
            f'while [ ! -e "{marks}/go" ]; do sleep 0.05; done; echo finished'
        )
        async with _worker(worker_client, store, tmp_path / "sandboxes", "outage"):
            step = asyncio.ensure_future(
                orchestrator.exec("outage-restart", Command(("sh", "-c", script)), max_wait=120)
            )
            await wait_until(
                lambda: _ready((marks / "started").exists()), 60, "the command to start"
            )
            pid = _server_pid(state)
            os.kill(pid, signal.SIGKILL)

            async def back() -> bool:
                if running_address(state) is None or _server_pid(state) == pid:
                    return False
                try:
                    return bool(await worker_client.service_client.check_health())
                except Exception:  # noqa: BLE001 - still starting
                    return False

            await wait_until(back, 90, "the server to come back")
            (marks / "go").touch()
            result = await asyncio.wait_for(step, 120)
    assert result.exit_code == 0, result
    assert result.stdout == b"finished\n"


async def test_a_step_whose_server_stays_away_is_not_called_failed(
    tmp_path: Path, store: BindingStore
) -> None:
    """The server does not come back within max_wait: the verdict is "unknown, may still run"."""
    state, marks = tmp_path / "state", tmp_path / "marks"
    marks.mkdir()
    async with embedded_temporal(state) as address:
        worker_client = await connect(address)
        client = await _bare_client(address)
        orchestrator = Orchestrator(
            client, store, "local", task_queue_prefix="away", policy=FAST_POLICY
        )
        script = f'touch "{marks}/started"; while [ ! -e "{marks}/go" ]; do sleep 0.05; done'
        async with _worker(worker_client, store, tmp_path / "sandboxes", "away"):
            step = asyncio.ensure_future(
                orchestrator.exec("outage-away", Command(("sh", "-c", script)), max_wait=2)
            )
            await wait_until(
                lambda: _ready((marks / "started").exists()), 60, "the command to start"
            )
            os.kill(_server_pid(state), signal.SIGKILL)
            with pytest.raises(ProviderUnavailable) as caught:
                await asyncio.wait_for(step, 60)
            (marks / "go").touch()
    message = str(caught.value)
    assert "unreachable" in message, message
    assert "may still run" in message, message
    assert "failed" not in message, message
    assert caught.value.hint is not None
    assert "before you run it again" in caught.value.hint


async def _ready(value: bool) -> bool:
    return value
