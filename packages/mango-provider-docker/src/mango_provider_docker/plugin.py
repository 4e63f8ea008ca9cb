"""Entry point of the mango plugin ``docker``: its pluggy hook implementations only."""

from __future__ import annotations

from mango.provider import (
    CapabilitySet,
    ConformanceTarget,
    ProviderRegistration,
    SupportLevel,
    hookimpl,
)
from mango.provider.plugin import ProviderPlugin
from mango_provider_docker.conformance import open_conformance_provider
from mango_provider_docker.layout import PROVIDER_NAME
from mango_provider_docker.settings import SETTINGS, open_docker_provider

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

PLUGIN = ProviderPlugin(
    ProviderRegistration(
        name=PROVIDER_NAME,
        capabilities=CapabilitySet(),
        support_level=SupportLevel.AVAILABLE,
        settings=SETTINGS,
        factory=open_docker_provider,
        description="one container per Session on a Docker Engine (aiodocker, no CLI)",
    ),
    ConformanceTarget(
        provider=PROVIDER_NAME,
        open=open_conformance_provider,
        description="local Docker Engine, image mango-test-busybox:latest, never pulls",
    ),
)
"""``docker``: core contract only (no optional capabilities yet)."""

mango_register_providers = PLUGIN.mango_register_providers
mango_register_conformance_targets = PLUGIN.mango_register_conformance_targets
