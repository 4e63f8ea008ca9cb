"""``mango doctor``: configuration and reachability of each part.

The checks run in order and a failing one never stops the ones after it:
configuration, plugins, database, the selected provider (a real round trip
to its backend), the environment profiles (each admitted for the selected
provider), then Temporal and a live worker for the selected provider and for
every other provider a binding or an intent in the database names, when
Temporal is in use (a Session of a provider without a worker can never be
finished or deleted). The database driver, the plugins and Temporal are imported by the
checks that use them.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import click

from mango.cli.common import EXIT_ERROR, run_async
from mango.cli.output import echo_json
from mango.config import Settings
from mango.domain.errors import MangoError, ProviderUnavailable
from mango.domain.registry import ProviderContext, ProviderRegistry

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["Check", "doctor", "profiles_check", "run_doctor", "temporal_checks"]

_PROBE_NAMESPACE = "doctor-probe"


@attrs.frozen
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str
    hint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return attrs.asdict(self)


async def _provider_check(
    env: Mapping[str, str], settings: Settings, registry: ProviderRegistry, namespace: str | None
) -> Check:
    """Open the selected provider and make a real round trip to its backend (``health()``).

    Without a namespace (no ``MANGO_NAMESPACE`` and no database) the provider
    is opened in a probe namespace: ``health()`` creates nothing, so no
    resource can be mislabelled.
    """
    name = f"provider {settings.sandbox}"
    try:
        registration = registry.get(settings.sandbox)
        missing = [s.env for s in registration.settings if s.required and not env.get(s.env)]
        if missing:
            return Check(
                name,
                False,
                "missing settings: " + ", ".join(missing),
                "set them in the worker's environment",
            )
        context = ProviderContext(namespace=namespace or _PROBE_NAMESPACE, environ=env)
        provider = registry.open(settings.sandbox, context)
        try:
            detail = await provider.health()
        finally:
            await provider.aclose()
    except ProviderUnavailable as exc:
        return Check(name, False, f"unreachable: {exc}", exc.hint)
    except MangoError as exc:
        return Check(name, False, str(exc), exc.hint)
    level = registration.support_level.value
    where = f"namespace {namespace}" if namespace else "namespace unknown (database unreachable)"
    return Check(name, True, f"reachable ({level}, {where}): {detail}")


async def run_doctor(env: Mapping[str, str]) -> list[Check]:
    """Run every check; a failing check never stops the ones after it."""
    checks: list[Check] = []
    try:
        settings = Settings.from_env(env)
    except MangoError as exc:
        return [Check("configuration", False, str(exc), exc.hint)]
    checks.append(Check("configuration", True, f"state directory {settings.state_dir}"))

    from mango.plugins import load_plugins

    try:
        host = load_plugins()
        registry = host.providers()
    except MangoError as exc:
        return [*checks, Check("plugins", False, str(exc), exc.hint)]
    checks.append(Check("plugins", True, "providers installed: " + ", ".join(registry.names())))

    from mango.postgres import open_store
    from mango.runtime import database_display, open_database

    namespace = settings.namespace
    referenced: tuple[str, ...] = ()
    try:
        async with open_database(settings, linger=True) as url:
            store = await open_store(url, min_size=1, max_size=1)
            try:
                await store.list_sessions(1)
                namespace = namespace or await store.deployment_namespace()
                referenced = await store.referenced_providers()
            finally:
                await store.aclose()
        checks.append(
            Check("database", True, f"reachable, migrations applied ({database_display(settings)})")
        )
    except MangoError as exc:
        checks.append(Check("database", False, f"{database_display(settings)}: {exc}", exc.hint))

    checks.append(await _provider_check(env, settings, registry, namespace))
    checks.append(profiles_check(settings, registry))

    checks.extend(await temporal_checks(settings, providers=referenced))
    return checks


def profiles_check(settings: Settings, registry: ProviderRegistry) -> Check:
    """Every environment profile builds and the selected provider admits it (declared only)."""
    from mango.app.admission import admit_environment
    from mango.runtime import environment_of

    try:
        profiles = settings.profiles()
        registration = registry.get(settings.sandbox)
    except MangoError as exc:
        return Check("profiles", False, str(exc), exc.hint)
    refused = []
    for name in profiles.names():
        try:
            fields = environment_of(settings, name)
            admit_environment(registration.name, registration.capabilities, fields)
        except MangoError as exc:
            refused.append(f"{name}: {exc}")
    if refused:
        return Check(
            "profiles",
            False,
            f"{settings.sandbox} cannot run: " + "; ".join(refused),
            "fix the profile, or select a provider that declares what it needs",
        )
    return Check("profiles", True, f"{', '.join(profiles.names())} ({profiles.source})")


async def temporal_checks(
    settings: Settings, timeout: float = 20.0, *, providers: tuple[str, ...] = ()
) -> list[Check]:
    """Doctor checks: is Temporal reachable, does a worker of MANGO_SANDBOX answer, and one of
    each provider in ``providers`` (those the database's bindings and intents name)?"""
    from mango.embedded.temporal import running_address

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
    from mango.temporal.client import connect

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
    for provider in sorted({settings.sandbox, *providers}):
        used = provider in providers
        checks.append(await _worker_check(client, settings, provider, timeout, used=used))
    return checks


async def _worker_check(
    client: Client, settings: Settings, provider: str, timeout: float, *, used: bool
) -> Check:
    """A live worker of ``provider`` answers the health workflow on its queue."""
    from mango.temporal.client import worker_health
    from mango.temporal.routing import task_queue_for

    queue = task_queue_for(provider, settings.task_queue_prefix)
    name = f"worker {queue}"
    why = " (sessions in the database use it)" if used else ""
    try:
        async with asyncio.timeout(timeout + 5):
            health = await worker_health(client, provider, settings.task_queue_prefix, timeout)
    except MangoError as exc:
        return Check(name, False, f"provider {provider}{why}: {exc}", exc.hint)
    except TimeoutError:
        return Check(
            name, False, f"provider {provider}{why}: no worker answered within {timeout:g} s"
        )
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
    return Check(name, health.ok, "; ".join(parts), hint)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor(as_json: bool) -> None:
    """Check configuration and the reachability of every part; exit 2 if a check fails."""
    checks = run_async(lambda: run_doctor(os.environ))
    if as_json:
        echo_json([c.as_dict() for c in checks])
    else:
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            click.echo(f"[{mark}] {check.name}: {check.detail}")
            if check.hint and not check.ok:
                click.echo(f"       hint: {check.hint}")
    if not all(check.ok for check in checks):
        sys.exit(EXIT_ERROR)
