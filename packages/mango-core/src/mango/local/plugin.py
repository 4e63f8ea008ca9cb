"""Plugin entry of the built-in local provider: its pluggy hook implementations only.

The registration and the offline conformance target are declared with the
settings (:mod:`mango.local.settings`); the hooks add them, the same two
functions every provider plugin has.
"""

from __future__ import annotations

from mango.local.settings import CONFORMANCE_TARGET, REGISTRATION
from mango.provider import ConformanceTargetRegistry, ProviderRegistry, hookimpl

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``local`` (development only, not an isolation boundary)."""
    registry.add(REGISTRATION)


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: a local provider under the run's scratch directory."""
    registry.add(CONFORMANCE_TARGET)
