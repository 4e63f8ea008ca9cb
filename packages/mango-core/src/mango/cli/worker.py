"""``mango worker``: the worker entry point, a composition root.

It selects the provider (an unknown ``MANGO_SANDBOX`` fails here, before
anything starts), connects to Temporal (``MANGO_TEMPORAL_ADDRESS`` and
``MANGO_TEMPORAL_NAMESPACE``, or an embedded dev server under the state
directory, stopped again on exit), opens the database and the provider, and
serves the provider's task queue until SIGTERM, SIGINT or SIGHUP. The first signal
shuts down gracefully (running steps get ``--graceful-shutdown`` seconds);
a second one stops at once.

``wrap_ports`` (tests only, through :func:`mango.cli.main.main`) wraps the
SessionManager's provider and store: the crash-recovery tests make the
worker crash at a lifecycle point that way (:mod:`mango.temporal.faults`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mango.cli.params import Seconds
from mango.config import Settings, max_read_bytes
from mango.domain.errors import MangoError

if TYPE_CHECKING:
    from mango.domain.registry import ProviderRegistration
    from mango.runtime import PortsWrapper
    from mango.temporal.messages import ReconcilerInput
    from mango.temporal.metrics import TemporalTelemetry

__all__ = ["METRICS_MESSAGE", "READY_MESSAGE", "UI_MESSAGE", "run_worker", "worker"]

READY_MESSAGE = "mango worker ready"
"""Printed to stderr once the worker polls its task queue (scripts may wait for it)."""

_LOG = logging.getLogger("mango.worker")


def _check_profiles(settings: Settings, registration: ProviderRegistration) -> None:
    """Resolve every environment profile as clients do; log those this provider cannot run.

    A profile file that cannot be read fails the start (ConfigurationError), as
    it would fail every client that names a profile.
    """
    from mango.app.admission import admit_environment
    from mango.runtime import environment_of

    profiles = settings.profiles()
    for name in profiles.names():
        try:
            admit_environment(
                registration.name, registration.capabilities, environment_of(settings, name)
            )
        except MangoError as exc:
            _LOG.warning("profile %s: %s", name, exc)


async def run_worker(
    settings: Settings,
    *,
    reconciler: ReconcilerInput | None,
    graceful_shutdown: float,
    sticky_queue_timeout: float = 5.0,
    wrap_ports: PortsWrapper | None = None,
    schedules: bool = True,
    ready_file: Path | None = None,
) -> None:
    """Serve ``settings.sandbox``'s task queue until SIGTERM/SIGINT/SIGHUP.

    With ``schedules``, the provider's fleet schedules (orphan sweep, idle
    eviction) are made to match ``settings.fleet``. ``wrap_ports`` is passed
    to :func:`mango.runtime.open_runtime`. Once the worker polls, ``ready_file``
    (if given) is written with its pid (the command removes it again when the
    worker stops).
    """
    # Imported here, not at module level: every other mango command stays quick to start.
    from mango.app.tools import ToolRunner
    from mango.cli.durable import open_temporal
    from mango.plugins import load_plugins
    from mango.postgres import PostgresSessionClaims
    from mango.runtime import database_display, open_runtime, select_provider
    from mango.temporal.activities import MangoActivities
    from mango.temporal.fleet_activities import FleetActivities
    from mango.temporal.worker import serve

    host = load_plugins()
    _, registration = select_provider(settings, host)  # unknown provider: fail before starting
    _check_profiles(settings, registration)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main = asyncio.current_task()

    def on_signal(signum: signal.Signals) -> None:
        if not stop.is_set():
            _LOG.info("%s received: shutting down gracefully", signum.name)
            stop.set()
        elif main is not None:
            _LOG.warning("%s received again: stopping now", signum.name)
            main.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        _LOG.info(
            "provider %s (%s); Temporal: %s; database: %s",
            registration.name,
            registration.support_level.value,
            settings.temporal_display,
            database_display(settings),
        )
        async with (
            _telemetry(settings) as telemetry,
            open_temporal(settings, start_embedded=True, telemetry=telemetry) as client,
            open_runtime(settings, host, wrap_ports=wrap_ports) as runtime,
        ):
            if settings.temporal_ui_port is not None:
                _announce_ui(settings)
            manager = runtime.manager
            activities = MangoActivities(
                manager,
                manager.store,
                client,
                registration,
                task_queue_prefix=settings.task_queue_prefix,
                tools=ToolRunner(max_read_bytes=max_read_bytes()),
            )
            fleet = FleetActivities(manager, PostgresSessionClaims(runtime.store.pool))
            await serve(
                client,
                activities,
                stop=stop,
                reconciler=reconciler,
                fleet=fleet,
                schedules=settings.fleet if schedules else None,
                graceful_shutdown=graceful_shutdown,
                sticky_queue_timeout=sticky_queue_timeout,
                on_ready=lambda: _announce_ready(ready_file),
            )
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)


def _announce_ready(ready_file: Path | None) -> None:
    """The ready line on stderr and, if asked for, the ready file (written whole, then renamed)."""
    click.echo(READY_MESSAGE, err=True)
    if ready_file is not None:
        partial = ready_file.with_name(f".{ready_file.name}.{os.getpid()}")
        partial.write_text(f"{os.getpid()}\n")
        partial.replace(ready_file)


METRICS_MESSAGE = "metrics:"
"""Printed to stderr, followed by the URL, when the worker serves Prometheus metrics."""


@contextlib.asynccontextmanager
async def _telemetry(settings: Settings) -> AsyncIterator[TemporalTelemetry | None]:
    """The metrics endpoint and tracing when ``MANGO_METRICS_PORT`` is set, else nothing."""
    from mango.app import telemetry

    telemetry.configure(session_ids=settings.telemetry_session_ids)
    if settings.metrics_port is None:
        yield None
        return
    from mango.temporal.metrics import serve_metrics

    host, port = settings.metrics_host, settings.metrics_port
    async with serve_metrics(host, port) as configured:
        click.echo(f"{METRICS_MESSAGE} http://{host}:{port}/metrics", err=True)
        yield configured


UI_MESSAGE = "Temporal web UI:"
"""Printed to stderr, followed by the URL, when the worker runs the dev server's web UI."""


def _announce_ui(settings: Settings) -> None:
    from mango.embedded.temporal import running_ui_url

    url = running_ui_url(settings.state_dir)
    if url is not None:
        namespace = settings.temporal_namespace
        click.echo(f"{UI_MESSAGE} {url}/namespaces/{namespace}/workflows", err=True)


@click.command(name="worker")
@click.option(
    "--reconcile-interval",
    type=Seconds(0.1, open_=False),
    default=5.0,
    show_default=True,
    help="Seconds between reconciler passes (intents and interrupted deletions).",
)
@click.option(
    "--no-reconciler",
    is_flag=True,
    help="Do not start or join this provider's reconciler, nor change its fleet schedules "
    "(MANGO_GC_INTERVAL, MANGO_EVICT_IDLE_AFTER).",
)
@click.option(
    "--graceful-shutdown",
    type=Seconds(0, open_=False),
    default=10.0,
    show_default=True,
    help="Seconds running steps get after SIGTERM before they are cancelled.",
)
@click.option(
    "--sticky-timeout",
    type=Seconds(0.1, open_=False),
    default=5.0,
    show_default=True,
    help="Seconds a workflow task waits for the worker that cached the workflow "
    "before another may take it (the pause after a worker crash).",
)
@click.option(
    "--ui",
    "ui_port",
    type=click.IntRange(0, 65535),
    is_flag=False,
    flag_value=0,
    default=None,
    metavar="[PORT]",
    help="Run the embedded Temporal dev server with its web UI on 127.0.0.1 (at PORT, or a "
    "free port) and print its URL. Default: MANGO_TEMPORAL_UI_PORT, else headless.",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write FILE (the worker's pid) once the worker polls its task queue, so a script "
    "can wait for it; a FILE left from before is removed at start, and FILE when it stops.",
)
def worker(
    *,
    reconcile_interval: float,
    no_reconciler: bool,
    graceful_shutdown: float,
    sticky_timeout: float,
    ui_port: int | None,
    ready_file: Path | None,
) -> None:
    """Run a Temporal worker for the provider MANGO_SANDBOX.

    It serves the task queue mango-<provider> (prefix: MANGO_TEMPORAL_TASK_QUEUE_PREFIX)
    on MANGO_TEMPORAL_ADDRESS / MANGO_TEMPORAL_NAMESPACE; with no address it
    runs an embedded Temporal dev server under the state directory. With
    MANGO_GC_INTERVAL or MANGO_EVICT_IDLE_AFTER set it schedules the orphan
    sweep or the idle eviction (Temporal schedules; unset settings delete
    them). Stop it with SIGTERM or Ctrl-C. A script waits for it with --ready-file.
    """
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # a waiter must not take a stale file for this worker
    for name in ("mango", "mango.worker"):
        logging.getLogger(name).setLevel(logging.INFO)
    import attrs

    from mango.cli.common import ports_wrapper
    from mango.temporal.messages import ReconcilerInput

    settings = Settings.from_env()
    if ui_port is not None:
        settings = attrs.evolve(settings, temporal_ui_port=ui_port)
    reconciler = None if no_reconciler else ReconcilerInput(interval=reconcile_interval)
    try:
        asyncio.run(
            run_worker(
                settings,
                reconciler=reconciler,
                graceful_shutdown=graceful_shutdown,
                sticky_queue_timeout=sticky_timeout,
                wrap_ports=ports_wrapper(),
                schedules=not no_reconciler,
                ready_file=ready_file,
            )
        )
    except asyncio.CancelledError:
        sys.exit(130)
    finally:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
