"""The worker: one provider, one task queue, every mango workflow and activity.

:func:`build_worker` assembles a :class:`temporalio.worker.Worker` for a
:class:`~mango.temporal.activities.MangoActivities` (and the fleet's
:class:`~mango.temporal.fleet_activities.FleetActivities`); :func:`serve`
runs it until told to stop, starting (or joining) the provider's reconciler
workflow and making its fleet schedules first (:mod:`mango.temporal.schedules`),
and shuts it down gracefully: in-flight activities get
``graceful_shutdown`` seconds, after which they are cancelled (and so are the
commands they run) and Temporal retries them on another worker.

Composing the ports (plugins, database, provider, Temporal connection) is
the job of the entry point, ``mango worker`` (:mod:`mango.cli.worker`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import temporalio
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from mango.domain.errors import ConfigurationError
from mango.domain.fleet import FleetPolicy
from mango.temporal.activities import MangoActivities
from mango.temporal.fleet_activities import FleetActivities
from mango.temporal.messages import ReconcilerInput
from mango.temporal.routing import reconciler_workflow_id
from mango.temporal.schedules import ensure_fleet_schedules
from mango.temporal.workflows import WORKFLOWS, ReconcilerWorkflow

__all__ = ["build_id", "build_worker", "ensure_reconciler", "serve", "workflow_runner"]

_LOG = logging.getLogger(__name__)
_READY_TIMEOUT = 30.0

# attrs and cattrs are side-effect free at import; passing them through keeps
# one copy of their machinery. mango's own modules are passed through by the
# workflows module itself (workflow.unsafe.imports_passed_through()).
_PASSTHROUGH = ("attrs", "attr", "cattrs")


@functools.cache
def _warm_converter() -> None:
    """Every message's converter hooks, built outside the sandbox (see ``messages.warm_up``)."""
    from mango.temporal import fleet_messages, messages, resource_messages

    for module in (messages, resource_messages, fleet_messages):
        module.warm_up()


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandboxed runner of mango's workflows (workers and replayers use the same).

    The converter's hooks for every message are built first, here, outside
    the sandbox: inside it, where the workflows' payloads are converted, the
    type hints they need may not resolve.
    """
    _warm_converter()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
    )


@functools.cache
def build_id() -> str:
    """The worker's build id: a digest of mango's workflow code and of temporalio's version.

    Temporal's default hashes the byte code of every loaded module (about 1 000
    in a worker, each read again from disk: a third of a CPU-second at every
    worker start). Without worker versioning the id only labels the workers in
    the server's records, so the code that decides a workflow's history (the
    ``mango.temporal`` and ``mango.domain`` sources) and the SDK's version name it.
    """
    digest = hashlib.sha256(f"temporalio {temporalio.__version__}\n".encode())
    root = Path(__file__).resolve().parent.parent
    for package in ("domain", "temporal"):
        for source in sorted((root / package).rglob("*.py")):
            digest.update(f"{source.relative_to(root)}\n".encode())
            digest.update(source.read_bytes())
    return f"mango-{digest.hexdigest()[:32]}"


def build_worker(
    client: Client,
    activities: MangoActivities,
    *,
    graceful_shutdown: float = 10.0,
    max_concurrent_activities: int = 100,
    sticky_queue_timeout: float = 5.0,
    fleet: FleetActivities | None = None,
) -> Worker:
    """A worker on ``activities.task_queue`` with every mango workflow and activity.

    Heartbeats are sent at most every second, so a cancellation reaches a
    running tool step within about a second. ``sticky_queue_timeout`` bounds
    how long a workflow task waits for this worker (which has the workflow
    cached) before any worker may take it: after a crash, the delay before
    another worker resumes the workflow. ``fleet`` adds the sweep and the
    eviction activities (the scheduled workflows fail without them).
    """
    return Worker(
        client,
        task_queue=activities.task_queue,
        workflows=list(WORKFLOWS),
        activities=[*activities.all(), *(fleet.all() if fleet is not None else ())],
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_queue_timeout),
        build_id=build_id(),
    )


async def ensure_reconciler(client: Client, task_queue: str, config: ReconcilerInput) -> str:
    """Start the reconciler workflow of ``task_queue``, or join the one running; return its id."""
    workflow_id = reconciler_workflow_id(task_queue)
    await client.start_workflow(
        ReconcilerWorkflow.run,
        config,
        id=workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    return workflow_id


async def _until_polling(client: Client, task_queue: str, running: asyncio.Task[None]) -> None:
    """Wait until the server lists this client among the queue's pollers (bounded).

    Until then a client checking for live workers would wrongly find none.
    """
    from mango.temporal.client import active_pollers

    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READY_TIMEOUT
    while client.identity not in await active_pollers(client, task_queue):
        if running.done():
            running.result()  # the worker failed to start; say why
            return
        if loop.time() >= deadline:
            _LOG.warning("the worker is not listed as a poller of %s yet", task_queue)
            return
        await asyncio.sleep(0.05)


async def serve(
    client: Client,
    activities: MangoActivities,
    *,
    stop: asyncio.Event,
    reconciler: ReconcilerInput | None = None,
    graceful_shutdown: float = 10.0,
    sticky_queue_timeout: float = 5.0,
    on_ready: Callable[[], None] | None = None,
    fleet: FleetActivities | None = None,
    schedules: FleetPolicy | None = None,
) -> None:
    """Run a worker until ``stop`` is set (or the worker fails), then shut it down.

    With ``reconciler`` set, the provider's reconciler workflow is started or
    joined once the worker polls; with ``schedules``, the fleet schedules of
    its task queue are made to match them (created, updated or deleted),
    which needs ``fleet``. ``on_ready`` is called when all that is done.
    """
    if schedules is not None and fleet is None:
        raise ConfigurationError("fleet schedules need the fleet activities on this worker")
    worker = build_worker(
        client,
        activities,
        graceful_shutdown=graceful_shutdown,
        sticky_queue_timeout=sticky_queue_timeout,
        fleet=fleet,
    )
    running = asyncio.create_task(worker.run(), name="mango-worker")
    stopping = asyncio.create_task(stop.wait(), name="mango-worker-stop")

    async def start_up() -> None:
        await _until_polling(client, activities.task_queue, running)
        if reconciler is not None:
            workflow_id = await ensure_reconciler(client, activities.task_queue, reconciler)
            _LOG.info("reconciler workflow %s is running", workflow_id)
        if schedules is not None:
            await ensure_fleet_schedules(client, activities.task_queue, schedules)

    starting = asyncio.create_task(start_up(), name="mango-worker-start-up")
    try:
        # A stop during start-up ends it there: the worker is never announced ready.
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            _LOG.info("stopped during start-up: never ready")
            return
        starting.result()
        if stop.is_set():
            _LOG.info("stopped during start-up: never ready")
            return
        _LOG.info(
            "worker ready: provider %s, task queue %s, namespace %s",
            activities.provider,
            activities.task_queue,
            client.namespace,
        )
        if on_ready is not None:
            on_ready()
        done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if running in done:
            running.result()  # a worker that stops on its own has failed; say why
            return
        _LOG.info("shutting down: waiting up to %g s for running steps", graceful_shutdown)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting})  # its own cancellation is not raised here
        if not running.done():
            await worker.shutdown()
            await running
        _LOG.info("worker stopped")
