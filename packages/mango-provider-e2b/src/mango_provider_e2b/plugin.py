"""Entry point of the mango plugin ``e2b``: its pluggy hook implementations only.

What it registers (the provider and its offline conformance target) is
declared in :mod:`mango_provider_e2b.settings`, a light module: the protocol
client is imported only when the provider is opened.
"""

from __future__ import annotations

from mango.provider import ConformanceTargetRegistry, ProviderRegistry, hookimpl
from mango_provider_e2b.settings import CONFORMANCE_TARGET, REGISTRATION

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``e2b``: one E2B microVM per Session."""
    registry.add(REGISTRATION)


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: the fake E2B service shipped in this distribution."""
    registry.add(CONFORMANCE_TARGET)
