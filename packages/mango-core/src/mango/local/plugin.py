"""Plugin entry of the built-in local provider: its pluggy hook implementations only."""

from __future__ import annotations

from mango.local.conformance import open_conformance_provider
from mango.local.layout import PROVIDER_NAME
from mango.local.settings import SETTINGS, open_local_provider
from mango.provider import (
    CapabilitySet,
    ConformanceTarget,
    ProviderRegistration,
    SupportLevel,
    hookimpl,
)
from mango.provider.plugin import ProviderPlugin

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

PLUGIN = ProviderPlugin(
    ProviderRegistration(
        name=PROVIDER_NAME,
        capabilities=CapabilitySet(),
        support_level=SupportLevel.DEVELOPMENT,
        settings=SETTINGS,
        factory=open_local_provider,
        description=(
            "host processes in a per-Session directory; NOT an isolation boundary "
            "(development and tests only)"
        ),
    ),
    ConformanceTarget(
        provider=PROVIDER_NAME,
        open=open_conformance_provider,
        description="local provider under the scratch directory",
    ),
)
"""``local``: development only, not an isolation boundary, no capabilities."""

mango_register_providers = PLUGIN.mango_register_providers
mango_register_conformance_targets = PLUGIN.mango_register_conformance_targets
