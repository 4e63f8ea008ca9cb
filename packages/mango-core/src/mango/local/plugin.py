"""Plugin entry of the built-in local provider: its pluggy hook implementations only.

The marker is made here rather than imported from :mod:`mango.plugins`, which
sits in the same layer and loads this module (no import cycle, no sibling import).
"""

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
from mango.local.conformance import open_conformance_provider
from mango.local.layout import PROVIDER_NAME
from mango.local.settings import SETTINGS, open_local_provider

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

hookimpl = pluggy.HookimplMarker("mango")


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``local``: development only, not an isolation boundary, no capabilities."""
    registry.add(
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
        )
    )


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target: a local provider under the run's scratch directory."""
    registry.add(
        ConformanceTarget(
            provider=PROVIDER_NAME,
            open=open_conformance_provider,
            description="local provider under the scratch directory",
        )
    )
