"""``mango doctor``: configuration and reachability of each part."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from mango.config import Settings
from mango.domain.errors import MangoError, ProviderUnavailable
from mango.domain.registry import ProviderContext, ProviderRegistry

__all__ = ["Check", "run_doctor"]

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
    try:
        async with open_database(settings, linger=True) as url:
            store = await open_store(url, min_size=1, max_size=1)
            try:
                await store.list_sessions(1)
                namespace = namespace or await store.deployment_namespace()
            finally:
                await store.aclose()
        checks.append(
            Check("database", True, f"reachable, migrations applied ({database_display(settings)})")
        )
    except MangoError as exc:
        checks.append(Check("database", False, f"{database_display(settings)}: {exc}", exc.hint))

    checks.append(await _provider_check(env, settings, registry, namespace))

    from mango.cli.durable import temporal_checks

    checks.extend(await temporal_checks(settings))
    return checks
