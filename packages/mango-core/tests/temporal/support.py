"""Helpers of the Temporal tests: waiting on conditions, counting resources, worker handles."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest
from temporalio.client import Client

from mango.domain import BindingStore
from mango.local import LocalProvider
from mango.temporal import MangoActivities, Orchestrator, StepPolicy

FAST_POLICY = StepPolicy(
    heartbeat_timeout=3.0,
    initial_retry=0.2,
    max_retry_interval=1.0,
    stop_grace=10.0,
)
"""Short timeouts so that a dead worker's step is retried within seconds."""


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    timeout: float = 30.0,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds.

    ``detail`` (a worker's log, say) is added to the failure's message.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() >= deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}{extra}")
        await asyncio.sleep(0.05)


LOADED_WALL_FACTOR = 10.0
"""A load-scaled wait fails after this many times its timeout in wall-clock time, however loaded."""


def cpu_share() -> float:
    """The share of a CPU a runnable process gets now: 1.0 on an idle machine.

    The CPUs this process may run on over the 1-minute load average (the
    run queue), at most 1.
    """
    cpus = len(os.sched_getaffinity(0))
    return min(1.0, cpus / max(os.getloadavg()[0], 1e-9))


async def wait_until_scaled(
    predicate: Callable[[], Awaitable[bool]], timeout: float, what: str = "condition"
) -> None:
    """Like :func:`wait_until`, with ``timeout`` in seconds of an unloaded machine.

    For waits on CPU-bound work in other processes (a worker's start-up):
    each polling interval counts only the CPU share a process got during it
    (:func:`cpu_share`), so a machine loaded tenfold allows ten times as
    long, and a hung process still fails the test, after
    ``LOADED_WALL_FACTOR`` times ``timeout`` at the latest.
    """
    loop = asyncio.get_running_loop()
    start = last = loop.time()
    budget = timeout
    while not await predicate():
        now = loop.time()
        budget -= (now - last) * cpu_share()
        last = now
        if budget <= 0 or now - start >= LOADED_WALL_FACTOR * timeout:
            pytest.fail(
                f"timed out after {now - start:.0f} s ({timeout:g} s scaled by the load; "
                f"load average now {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} "
                f"CPUs) waiting for {what}"
            )
        await asyncio.sleep(0.05)


def session_dirs(base: Path) -> list[Path]:
    """The provider resources of the local provider under ``base`` (live or half-deleted)."""
    if not base.exists():
        return []
    return sorted(path for path in base.iterdir() if path.name.startswith("mango-"))


WorkerFactory = Callable[..., AbstractAsyncContextManager[MangoActivities]]


MANGO = [sys.executable, "-c", "from mango.cli import main; main()"]
"""The ``mango`` command, run by this interpreter."""
MANGO_WITH_FAULTS = [sys.executable, str(Path(__file__).parents[1] / "faulty_mango.py")]
"""``mango`` with crash injection (``MANGO_FAULT_POINT``), run by this interpreter."""


@attrs.frozen
class Harness:
    """Everything a workflow test needs, as one fixture."""

    client: Client
    store: BindingStore
    provider: LocalProvider
    sandbox_dir: Path
    queue_prefix: str
    orchestrator: Orchestrator
    run_worker: WorkerFactory
    sid: Callable[[str], str]

    def worker(self, **options: Any) -> AbstractAsyncContextManager[MangoActivities]:
        """An in-process worker for the local provider, for the duration of the block."""
        return self.run_worker(self.provider, self.store, **options)

    def orchestrator_with(self, **options: Any) -> Orchestrator:
        """A client like ``orchestrator`` with other settings."""
        return attrs.evolve(self.orchestrator, **options)


@attrs.define
class WorkerProcess:
    """A ``mango worker`` child process and its log."""

    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        """Everything the worker printed so far."""
        return self.log.read_text(errors="replace")

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until it prints the ready line (it is polling); ``timeout`` scales with the load.

        A worker's start-up is CPU work in the child (imports, the provider's
        HTTP clients, temporalio's workflow validation and build id: about
        2.3 CPU-seconds, most of it before it can poll), so on a loaded
        machine (several workers started at once, pytest-xdist, other jobs)
        it takes proportionally longer: :func:`wait_until_scaled`.
        """

        async def ready() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"worker exited with {self.process.returncode}:\n{self.text()}")
            return "mango worker ready" in self.text()

        await wait_until_scaled(ready, timeout, "the worker to be ready")

    async def wait_exit(self, timeout: float = 60.0) -> int:
        """Wait until it exits on its own; return its return code."""

        async def exited() -> bool:
            return self.process.poll() is not None

        await wait_until(exited, timeout, "the worker to exit")
        return self.process.returncode

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within 20 s."""
        stop_all([self])


def stop_all(workers: list[WorkerProcess]) -> None:
    """SIGTERM every running worker at once, then reap each (SIGKILL after 20 s).

    Each worker's graceful shutdown takes a second or two; signalled together
    they take that once instead of once per worker.
    """
    running = [worker.process for worker in workers if worker.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@attrs.frozen
class WorkerEnv:
    """What a worker subprocess needs to join the test's database, server and queues."""

    database_url: str
    temporal_address: str
    queue_prefix: str
    sandbox_dir: Path
    state_dir: Path

    def environ(self, **extra: str) -> dict[str, str]:
        """The environment of ``mango worker`` / ``mango exec`` children."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MANGO_")}
        env.update(
            MANGO_DATABASE_URL=self.database_url,
            MANGO_TEMPORAL_ADDRESS=self.temporal_address,
            MANGO_TEMPORAL_TASK_QUEUE_PREFIX=self.queue_prefix,
            MANGO_SANDBOX="local",
            MANGO_LOCAL_SANDBOX_DIR=str(self.sandbox_dir),
            MANGO_STATE_DIR=str(self.state_dir),
            MANGO_DISABLE_PLUGINS="1",
        )
        env.update(extra)
        return env
