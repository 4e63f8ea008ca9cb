"""The hook implementations every provider plugin has, built from two values.

A provider distribution's ``plugin.py`` (its entry-point target) describes
its registration and offline conformance target once and exposes the hooks
this class makes::

    PLUGIN = ProviderPlugin(REGISTRATION, TARGET)
    mango_register_providers = PLUGIN.mango_register_providers
    mango_register_conformance_targets = PLUGIN.mango_register_conformance_targets

pluggy reads the ``@hookimpl`` marks through the bound methods, so the module
stays an ordinary plugin with the usual hook names.
"""

from __future__ import annotations

import attrs
import pluggy

from mango.domain.registry import (
    ConformanceTarget,
    ConformanceTargetRegistry,
    ProviderRegistration,
    ProviderRegistry,
)

__all__ = ["ProviderPlugin"]

_hookimpl = pluggy.HookimplMarker("mango")


@attrs.frozen
class ProviderPlugin:
    """One provider's registration and (optional) offline conformance target, as hooks."""

    registration: ProviderRegistration
    target: ConformanceTarget | None = None

    @_hookimpl
    def mango_register_providers(self, registry: ProviderRegistry) -> None:
        """Add the registration."""
        registry.add(self.registration)

    @_hookimpl
    def mango_register_conformance_targets(self, registry: ConformanceTargetRegistry) -> None:
        """Add the conformance target, if there is one."""
        if self.target is not None:
            registry.add(self.target)
