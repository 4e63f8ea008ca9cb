"""The hook implementations every provider plugin has, built from two values.

A provider distribution's ``plugin.py`` (its entry-point target) exposes the
hooks this class makes from its registration and offline conformance target::

    mango_register_providers, mango_register_conformance_targets = ProviderPlugin(
        REGISTRATION, TARGET
    ).hooks()

pluggy reads the ``@hookimpl`` marks through the bound methods, so the module
stays an ordinary plugin with the usual hook names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from mango.domain.registry import (
    ConformanceTarget,
    ConformanceTargetRegistry,
    ProviderRegistration,
    ProviderRegistry,
)
from mango.provider import hookimpl

__all__ = ["ProviderPlugin"]


@attrs.frozen
class ProviderPlugin:
    """One provider's registration and (optional) offline conformance target, as hooks."""

    registration: ProviderRegistration
    target: ConformanceTarget | None = None

    def hooks(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """``(mango_register_providers, mango_register_conformance_targets)`` for a module."""
        return self.mango_register_providers, self.mango_register_conformance_targets

    @hookimpl
    def mango_register_providers(self, registry: ProviderRegistry) -> None:
        """Add the registration."""
        registry.add(self.registration)

    @hookimpl
    def mango_register_conformance_targets(self, registry: ConformanceTargetRegistry) -> None:
        """Add the conformance target, if there is one."""
        if self.target is not None:
            registry.add(self.target)
