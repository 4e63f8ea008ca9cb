"""Plugin loading: pluggy hook specifications and a typed facade over them.

Plugins are found through the ``mango`` entry-point group. Each implements
``mango_register_providers(registry)`` and calls ``registry.add(...)``. The
built-in local provider registers through the same hook.

Set ``MANGO_DISABLE_PLUGINS=1`` to load only the built-in providers, or
``MANGO_DISABLE_PLUGINS=name[,name...]`` to skip just the named entry points:
the recovery path when an installed plugin breaks at import time.
"""

from mango.plugins.manager import (
    DISABLE_PLUGINS_ENV,
    PluginHost,
    disabled_plugins,
    hookimpl,
    hookspec,
    load_plugins,
)

__all__ = [
    "DISABLE_PLUGINS_ENV",
    "PluginHost",
    "disabled_plugins",
    "hookimpl",
    "hookspec",
    "load_plugins",
]
