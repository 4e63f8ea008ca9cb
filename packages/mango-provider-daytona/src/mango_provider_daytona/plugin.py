"""Entry point of the mango plugin ``daytona``: its pluggy hook implementations only.

What it registers (the provider and its offline conformance target) is
declared in :mod:`mango_provider_daytona.settings`, a light module: the API
client is imported only when the provider is opened.
"""

from __future__ import annotations

from mango.provider import ConformanceTargetRegistry, ProviderRegistry, hookimpl
from mango_provider_daytona.settings import CONFORMANCE_TARGET, REGISTRATION

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``daytona``: core contract only, output at the end of each command."""
    registry.add(REGISTRATION)


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: the fake Daytona, a fresh one per scratch directory."""
    registry.add(CONFORMANCE_TARGET)
