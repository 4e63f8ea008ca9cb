"""Entry point of the mango plugin ``docker``: its pluggy hook implementations only."""

from __future__ import annotations

import pluggy

from mango.domain.capabilities import CapabilitySet
from mango.domain.registry import (
    ConformanceTarget,
    ConformanceTargetRegistry,
    ProviderRegistration,
    ProviderRegistry,
    SupportLevel,
)
from mango_provider_docker.conformance import open_conformance_provider
from mango_provider_docker.layout import PROVIDER_NAME
from mango_provider_docker.settings import SETTINGS, open_docker_provider

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

hookimpl = pluggy.HookimplMarker("mango")


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``docker``: beta, core contract only (no optional capabilities yet)."""
    registry.add(
        ProviderRegistration(
            name=PROVIDER_NAME,
            capabilities=CapabilitySet(),
            support_level=SupportLevel.AVAILABLE,
            settings=SETTINGS,
            factory=open_docker_provider,
            description="one container per Session on a Docker Engine (aiodocker, no CLI)",
        )
    )


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: the local Docker Engine with the busybox test image."""
    registry.add(
        ConformanceTarget(
            provider=PROVIDER_NAME,
            open=open_conformance_provider,
            description="local Docker Engine, image mango-test-busybox:latest, never pulls",
        )
    )
