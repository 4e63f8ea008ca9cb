"""The plugin manager factory and the typed facade over ``pm.hook``."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from collections.abc import Mapping
from types import ModuleType

import attrs
import pluggy

from mango.domain.errors import ConfigurationError
from mango.domain.registry import ConformanceTargetRegistry, ProviderRegistry
from mango.plugins import hookspecs
from mango.provider import hookimpl as provider_hookimpl

__all__ = [
    "DISABLE_PLUGINS_ENV",
    "ENTRY_POINT_GROUP",
    "PluginHost",
    "disabled_plugins",
    "hookimpl",
    "hookspec",
    "load_plugins",
]

ENTRY_POINT_GROUP = "mango"
DISABLE_PLUGINS_ENV = "MANGO_DISABLE_PLUGINS"
_ALL = frozenset({"1", "true", "yes", "all"})

hookspec = hookspecs.hookspec
hookimpl = provider_hookimpl
"""The marker of the provider surface (:data:`mango.provider.hookimpl`), re-exported."""


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


def disabled_plugins(environ: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """The entry-point names ``MANGO_DISABLE_PLUGINS`` switches off; None means all of them.

    ``1``/``true``/``yes``/``all`` disable every external plugin (built-ins stay);
    a comma-separated list of entry-point names disables just those.
    """
    env = os.environ if environ is None else environ
    text = env.get(DISABLE_PLUGINS_ENV, "").strip()
    if text.lower() in _ALL:
        return None
    return frozenset(name.strip() for name in text.split(",") if name.strip())


@functools.cache
def _entry_points_on(path: tuple[str, ...]) -> tuple[importlib.metadata.EntryPoint, ...]:
    """The installed ``mango`` entry points, by name: read once per ``sys.path`` (``path``).

    Finding them scans the metadata of every installed distribution, and a
    command loads the plugins more than once (to select the provider, then to
    open it). A distribution installed into a directory already searched is
    seen at the process's next start, as with any entry-point plugin system.
    """
    del path  # only the cache key: importlib.metadata searches sys.path itself
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return tuple(sorted(found, key=lambda ep: ep.name))


def _load_entry_points(pm: pluggy.PluginManager, disabled: frozenset[str] | None) -> None:
    if disabled is None:
        return
    for entry_point in _entry_points_on(tuple(sys.path)):
        if entry_point.name in disabled or pm.get_plugin(entry_point.name) is not None:
            continue
        try:
            plugin = entry_point.load()
        except Exception as exc:
            dist = (
                entry_point.dist.name if entry_point.dist is not None else "an unknown distribution"
            )
            raise ConfigurationError(
                f"the mango plugin {entry_point.name!r} ({entry_point.value}, from {dist}) "
                f"failed to load: {type(exc).__name__}: {exc}",
                hint=f"set {DISABLE_PLUGINS_ENV}={entry_point.name} to start without it, "
                f"then upgrade or uninstall {dist}",
            ) from exc
        pm.register(plugin, name=entry_point.name)


def load_plugins(
    *,
    extra: list[object] | None = None,
    entry_points: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> PluginHost:
    """Build a fresh plugin manager: built-ins, entry points, then ``extra``.

    ``entry_points=None`` loads the ``mango`` entry-point group except what
    ``MANGO_DISABLE_PLUGINS`` switches off (see :func:`disabled_plugins`). A
    plugin that fails to import is a :class:`ConfigurationError` naming its
    entry point and distribution, with the setting that skips just that one.
    """
    pm = pluggy.PluginManager("mango")
    pm.add_hookspecs(hookspecs)
    for module in _builtin_plugins():
        pm.register(module, name=f"mango.builtin.{module.__name__.rsplit('.', 2)[-2]}")
    if entry_points is None:
        _load_entry_points(pm, disabled_plugins(environ))
    elif entry_points:
        _load_entry_points(pm, frozenset())
    for plugin in extra or ():
        pm.register(plugin)
    pm.check_pending()
    return PluginHost(pm)
