"""The entry-point target of tinybox: its pluggy hook implementations, nothing else.

``pyproject.toml`` points the ``mango`` entry-point group here. Registering
must stay cheap: no SDK import, no credential read. The factory does that,
and only when ``MANGO_SANDBOX=tinybox`` selects this provider.
"""

from __future__ import annotations

from mango.provider import (
    CapabilitySet,
    ConformanceTarget,
    ConformanceTargetRegistry,
    Provider,
    ProviderContext,
    ProviderRegistration,
    ProviderRegistry,
    SettingSpec,
    SupportLevel,
    hookimpl,
)

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


def _open_provider(context: ProviderContext) -> Provider:
    from mango_provider_tinybox.provider import TinyboxProvider

    # Every name and owner record carries the deployment's namespace.
    return TinyboxProvider.from_env(namespace=context.namespace)


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``tinybox``: no optional capabilities, preview."""
    registry.add(
        ProviderRegistration(
            name="tinybox",
            capabilities=CapabilitySet(),
            support_level=SupportLevel.PREVIEW,
            settings=(
                SettingSpec(
                    env="TINYBOX_DIR",
                    description="absolute directory holding one sub-directory per Session",
                    required=True,
                ),
            ),
            factory=_open_provider,
            description="example provider: host directories, NOT an isolation boundary",
        )
    )


@hookimpl
def mango_register_conformance_targets(registry: ConformanceTargetRegistry) -> None:
    """Register the offline target that ``mango-conformance run tinybox`` uses."""
    from mango_provider_tinybox.provider import open_conformance_provider

    registry.add(
        ConformanceTarget(
            provider="tinybox",
            open=open_conformance_provider,
            description="tinybox under the run's scratch directory",
        )
    )
