"""``mango doctor``: configuration and reachability of each part."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from mango.config import Settings
from mango.domain.errors import MangoError

__all__ = ["Check", "run_doctor"]


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

    provider_ok = False
    try:
        registration = registry.get(settings.sandbox)
        missing = [s.env for s in registration.settings if s.required and not env.get(s.env)]
        if missing:
            checks.append(
                Check(
                    f"provider {settings.sandbox}",
                    False,
                    "missing settings: " + ", ".join(missing),
                    "set them in the worker's environment",
                )
            )
        else:
            provider = registry.open(settings.sandbox)
            await provider.aclose()
            level = registration.support_level.value
            checks.append(Check(f"provider {settings.sandbox}", True, f"opens ({level})"))
            provider_ok = True
    except MangoError as exc:
        checks.append(Check(f"provider {settings.sandbox}", False, str(exc), exc.hint))
    _ = provider_ok

    from mango.postgres import open_store
    from mango.runtime import database_display, open_database

    try:
        async with open_database(settings) as url:
            store = await open_store(url, min_size=1, max_size=1)
            try:
                await store.list_sessions(1)
            finally:
                await store.aclose()
        checks.append(
            Check("database", True, f"reachable, migrations applied ({database_display(settings)})")
        )
    except MangoError as exc:
        checks.append(Check("database", False, f"{database_display(settings)}: {exc}", exc.hint))

    from mango.cli.durable import temporal_checks

    checks.extend(await temporal_checks(settings))
    return checks
