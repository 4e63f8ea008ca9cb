"""The durable path of the command line: the Temporal connection, tool steps, deletion.

Used by ``mango worker`` and by ``mango exec`` / ``mango sessions delete`` with
``--via-temporal`` (``mango doctor`` checks Temporal on its own). Clients need only the database
and Temporal; providers and their credentials stay on workers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio.client import Client

from mango.config import Settings
from mango.domain.errors import ConfigurationError
from mango.domain.values import Command, ExecResult, SandboxSpec
from mango.embedded.temporal import embedded_temporal, running_address
from mango.postgres import PostgresBindingStore, open_store
from mango.runtime import open_database, select_provider
from mango.temporal.client import Orchestrator, connect
from mango.temporal.metrics import TemporalTelemetry

__all__ = [
    "delete_via_temporal",
    "exec_via_temporal",
    "open_temporal",
]


@asynccontextmanager
async def open_temporal(
    settings: Settings, *, start_embedded: bool, telemetry: TemporalTelemetry | None = None
) -> AsyncIterator[Client]:
    """A Temporal client: ``MANGO_TEMPORAL_ADDRESS``, else the embedded dev server.

    With ``start_embedded`` (the worker) the dev server under the state
    directory is started or joined, and stopped on exit if this was its last
    user; ``settings.temporal_ui_port`` gives it its web UI. Without it
    (clients) only a server that is already running is used (``telemetry``:
    the worker's metrics and tracing, :mod:`mango.temporal.metrics`):
    a client that started one would wait for a worker that does not exist.
    """
    namespace = settings.temporal_namespace
    keys = settings.temporal_payload_keys
    ui_port = settings.temporal_ui_port if start_embedded else None
    if settings.temporal_address is not None and ui_port is not None:
        raise ConfigurationError(
            "the web UI (--ui, MANGO_TEMPORAL_UI_PORT) is the embedded dev server's, but "
            f"MANGO_TEMPORAL_ADDRESS points at {settings.temporal_address}",
            hint="use that server's own web UI, or unset MANGO_TEMPORAL_ADDRESS",
        )
    if settings.temporal_address is not None:
        yield await connect(
            settings.temporal_address, namespace, payload_keys=keys, telemetry=telemetry
        )
        return
    if start_embedded:
        async with embedded_temporal(
            settings.state_dir, namespace=namespace, ui_port=ui_port, keep_alive=True
        ) as address:
            yield await connect(address, namespace, payload_keys=keys, telemetry=telemetry)
        return
    running = running_address(settings.state_dir)
    if running is None:
        raise ConfigurationError(
            f"no Temporal server: MANGO_TEMPORAL_ADDRESS is unset and no embedded dev server "
            f"is running under {settings.state_dir / 'temporal'}",
            hint="start 'mango worker' (it runs one), set MANGO_TEMPORAL_ADDRESS, "
            "or drop --via-temporal",
        )
    yield await connect(running, namespace, payload_keys=keys)


@asynccontextmanager
async def _orchestrator(settings: Settings) -> AsyncIterator[Orchestrator]:
    # Admission reads the routed provider's registration: plugins, no provider, no credential.
    registry, _ = select_provider(settings)
    async with (
        open_temporal(settings, start_embedded=False) as client,
        open_database(settings, linger=True) as url,
    ):
        store: PostgresBindingStore = await open_store(url, min_size=1, max_size=2)
        try:
            yield Orchestrator(
                client,
                store,
                settings.sandbox,
                task_queue_prefix=settings.task_queue_prefix,
                capabilities=registry.capabilities,
                outputs_quiet_period=settings.outputs_quiet_period,
            )
        finally:
            await store.aclose()


async def exec_via_temporal(
    settings: Settings,
    session_id: str,
    command: Command,
    *,
    spec: SandboxSpec | None = None,
    max_wait: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> ExecResult:
    """Run ``command`` as an ``Exec`` step of the Session's workflow; return its result.

    The worker runs it through the ``ExecCommand`` activity: the same
    sandbox call as the direct path, so the same output cap, truncation
    flags and byte-exact stdin. ``spec`` (default: ``MANGO_EXEC_TIMEOUT``
    only) is admitted for the Session's provider before anything is
    written. While the provider is unavailable, or no worker picks the step
    up, ``on_wait`` hears why, and it hears what a package setup installs;
    after ``max_wait`` seconds (default ``MANGO_TEMPORAL_MAX_WAIT``) of
    waiting the step is cancelled and :class:`ProviderUnavailable` raised.
    """
    report = (lambda waiting: on_wait(waiting.describe())) if on_wait is not None else None
    async with _orchestrator(settings) as orchestrator:
        return await orchestrator.exec(
            session_id,
            command,
            spec=spec or SandboxSpec(timeout=settings.exec_timeout),
            max_wait=settings.temporal_max_wait if max_wait is None else max_wait,
            on_wait=report,
            on_progress=on_wait,
        )


async def delete_via_temporal(settings: Settings, session_ids: list[str]) -> list[bool]:
    """Delete each Session through its cleanup workflow; False where it was already gone."""
    async with _orchestrator(settings) as orchestrator:
        return [await orchestrator.delete_session(session_id) for session_id in session_ids]
