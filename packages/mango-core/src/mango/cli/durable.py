"""The durable path of the command line: Temporal connection, tool steps, deletion, checks.

Used by ``mango worker``, by ``mango exec`` / ``mango sessions delete`` with
``--via-temporal`` and by ``mango doctor``. Clients need only the database
and Temporal; providers and their credentials stay on workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio.client import Client

from mango.cli.doctor import Check
from mango.config import Settings
from mango.domain.errors import ConfigurationError, MangoError
from mango.domain.values import Command, ExecResult, SandboxSpec
from mango.embedded.temporal import embedded_temporal, running_address
from mango.postgres import PostgresBindingStore, open_store
from mango.runtime import open_database
from mango.temporal.client import Orchestrator, connect, worker_health
from mango.temporal.routing import task_queue_for

__all__ = [
    "delete_via_temporal",
    "exec_via_temporal",
    "open_temporal",
    "temporal_checks",
]


@asynccontextmanager
async def open_temporal(settings: Settings, *, start_embedded: bool) -> AsyncIterator[Client]:
    """A Temporal client: ``MANGO_TEMPORAL_ADDRESS``, else the embedded dev server.

    With ``start_embedded`` (the worker) the dev server under the state
    directory is started or joined, and stopped on exit if this was its last
    user. Without it (clients) only a server that is already running is used:
    a client that started one would wait for a worker that does not exist.
    """
    namespace = settings.temporal_namespace
    keys = settings.temporal_payload_keys
    if settings.temporal_address is not None:
        yield await connect(settings.temporal_address, namespace, payload_keys=keys)
        return
    if start_embedded:
        async with embedded_temporal(settings.state_dir, namespace=namespace) as address:
            yield await connect(address, namespace, payload_keys=keys)
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
    async with (
        open_temporal(settings, start_embedded=False) as client,
        open_database(settings, linger=True) as url,
    ):
        store: PostgresBindingStore = await open_store(url, min_size=1, max_size=2)
        try:
            yield Orchestrator(
                client, store, settings.sandbox, task_queue_prefix=settings.task_queue_prefix
            )
        finally:
            await store.aclose()


async def exec_via_temporal(
    settings: Settings,
    session_id: str,
    command: Command,
    *,
    max_wait: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> ExecResult:
    """Run ``command`` as an ``Exec`` step of the Session's workflow; return its result.

    The worker runs it through the ``ExecCommand`` activity: the same
    sandbox call as the direct path, so the same output cap, truncation
    flags and byte-exact stdin. While the provider is unavailable,
    ``on_wait`` hears why; after ``max_wait`` seconds (default
    ``MANGO_TEMPORAL_MAX_WAIT``) the step is cancelled and
    :class:`ProviderUnavailable` raised.
    """
    report = (lambda waiting: on_wait(waiting.describe())) if on_wait is not None else None
    async with _orchestrator(settings) as orchestrator:
        return await orchestrator.exec(
            session_id,
            command,
            spec=SandboxSpec(timeout=settings.exec_timeout),
            max_wait=settings.temporal_max_wait if max_wait is None else max_wait,
            on_wait=report,
        )


async def delete_via_temporal(settings: Settings, session_ids: list[str]) -> list[bool]:
    """Delete each Session through its cleanup workflow; False where it was already gone."""
    async with _orchestrator(settings) as orchestrator:
        return [await orchestrator.delete_session(session_id) for session_id in session_ids]


async def temporal_checks(settings: Settings, timeout: float = 20.0) -> list[Check]:
    """Doctor checks: is Temporal reachable, and does a worker of MANGO_SANDBOX answer?"""
    address = settings.temporal_address or running_address(settings.state_dir)
    if address is None:
        return [
            Check(
                "temporal",
                True,
                f"not in use: MANGO_TEMPORAL_ADDRESS is unset and no embedded dev server runs "
                f"under {settings.state_dir / 'temporal'} ('mango worker' starts one)",
            )
        ]
    try:
        async with asyncio.timeout(timeout):
            client = await connect(
                address,
                settings.temporal_namespace,
                payload_keys=settings.temporal_payload_keys,
            )
    except MangoError as exc:
        return [Check("temporal", False, str(exc), exc.hint)]
    except TimeoutError:
        return [Check("temporal", False, f"no answer from {address} within {timeout:g} s")]
    checks = [
        Check("temporal", True, f"reachable at {address}, namespace {settings.temporal_namespace}")
    ]
    queue = task_queue_for(settings.sandbox, settings.task_queue_prefix)
    name = f"worker {queue}"
    try:
        async with asyncio.timeout(timeout + 5):
            health = await worker_health(
                client, settings.sandbox, settings.task_queue_prefix, timeout
            )
    except MangoError as exc:
        return [*checks, Check(name, False, str(exc), exc.hint)]
    except TimeoutError:
        return [*checks, Check(name, False, f"no worker answered within {timeout:g} s")]
    parts = [f"{health.worker}: provider {health.provider} {health.detail}"]
    if health.support_level:
        parts.append(f"support level {health.support_level}")
    parts.extend(
        f"{credential.env} {'set' if credential.present else 'NOT set'}"
        for credential in health.credentials
    )
    hint = None
    if health.missing_settings:
        parts.append("missing settings: " + ", ".join(health.missing_settings))
        hint = "set them in the worker's environment and restart it"
    elif not health.reachable:
        hint = "check the provider's endpoint and credentials on the worker host"
    return [*checks, Check(name, health.ok, "; ".join(parts), hint)]
