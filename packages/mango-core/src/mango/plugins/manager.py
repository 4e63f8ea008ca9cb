"""The plugin manager factory and the typed facade over ``pm.hook``."""

from __future__ import annotations

import os
from types import ModuleType

import attrs
import pluggy

from mango.domain.errors import ConfigurationError
from mango.domain.registry import ConformanceTargetRegistry, ProviderRegistry
from mango.plugins import hookspecs

__all__ = [
    "DISABLE_PLUGINS_ENV",
    "ENTRY_POINT_GROUP",
    "PluginHost",
    "hookimpl",
    "hookspec",
    "load_plugins",
]

ENTRY_POINT_GROUP = "mango"
DISABLE_PLUGINS_ENV = "MANGO_DISABLE_PLUGINS"

hookspec = hookspecs.hookspec
hookimpl = pluggy.HookimplMarker("mango")


def _builtin_plugins() -> list[ModuleType]:
    from mango.local import plugin as local_plugin

    return [local_plugin]


@attrs.define
class PluginHost:
    """Typed access to the loaded plugins; nothing else touches ``pm.hook``."""

    pm: pluggy.PluginManager

    def providers(self) -> ProviderRegistry:
        """Collect provider registrations from every plugin."""
        registry = ProviderRegistry()
        self.pm.hook.mango_register_providers(registry=registry)
        return registry

    def conformance_targets(self) -> ConformanceTargetRegistry:
        """Collect offline conformance targets from every plugin."""
        registry = ConformanceTargetRegistry()
        self.pm.hook.mango_register_conformance_targets(registry=registry)
        return registry

    def plugin_names(self) -> list[str]:
        """Names of the loaded plugins (entry-point names for external ones)."""
        return sorted(name for name, _ in self.pm.list_name_plugin() if name)


def load_plugins(
    *,
    extra: list[object] | None = None,
    entry_points: bool | None = None,
) -> PluginHost:
    """Build a fresh plugin manager: built-ins, entry points, then ``extra``.

    ``entry_points=None`` loads the ``mango`` entry-point group unless
    ``MANGO_DISABLE_PLUGINS=1``. A plugin that fails to import is reported as
    a :class:`ConfigurationError` naming it and the way around it.
    """
    pm = pluggy.PluginManager("mango")
    pm.add_hookspecs(hookspecs)
    for module in _builtin_plugins():
        pm.register(module, name=f"mango.builtin.{module.__name__.rsplit('.', 2)[-2]}")
    if entry_points is None:
        entry_points = os.environ.get(DISABLE_PLUGINS_ENV, "") not in ("1", "true", "yes")
    if entry_points:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:
            raise ConfigurationError(
                f"a mango plugin failed to load: {type(exc).__name__}: {exc}",
                hint=f"set {DISABLE_PLUGINS_ENV}=1 to start with built-in providers only, "
                "then upgrade or uninstall the broken plugin",
            ) from exc
    for plugin in extra or ():
        pm.register(plugin)
    pm.check_pending()
    return PluginHost(pm)
