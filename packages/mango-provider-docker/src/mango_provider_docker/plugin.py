"""Entry point of the mango plugin ``docker``: its pluggy hook implementations only.

What it registers (the provider and its offline conformance target) is
declared in :mod:`mango_provider_docker.settings`, a light module: aiodocker
is imported only when the provider is opened.
"""

from __future__ import annotations

from mango.provider import ConformanceTargetRegistry, ProviderRegistry, hookimpl
from mango_provider_docker.settings import CONFORMANCE_TARGET, REGISTRATION

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``docker``: one container per Session on a Docker Engine."""
    registry.add(REGISTRATION)


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: the local Docker Engine with the busybox test image."""
    registry.add(CONFORMANCE_TARGET)
