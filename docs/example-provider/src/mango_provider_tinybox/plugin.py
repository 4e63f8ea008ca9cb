"""The entry-point target of tinybox: its pluggy hook implementations, nothing else.

``pyproject.toml`` points the ``mango`` entry-point group here. Registering
must stay cheap: no SDK import, no credential read. The factory does that,
and only when ``MANGO_SANDBOX=tinybox`` selects this provider.
"""

from __future__ import annotations

from mango.provider import (
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    CapabilitySet,
    ConformanceTarget,
    ConformanceTargetRegistry,
    Provider,
    ProviderContext,
    ProviderRegistration,
    ProviderRegistry,
    SettingSpec,
    SupportLevel,
    TargetCost,
    hookimpl,  # the one marker: pluggy.HookimplMarker("mango")
)

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]


def _open_provider(context: ProviderContext) -> Provider:
    from mango_provider_tinybox.provider import TinyboxProvider

    # Settings come from the context's environment (what the caller chose, never
    # os.environ); every name and owner record carries the deployment's namespace.
    return TinyboxProvider.from_settings(context.environ, namespace=context.namespace)


@hookimpl
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Register ``tinybox``: no optional capabilities, preview."""
    registry.add(
        ProviderRegistration(
            name="tinybox",  # lowercase: [a-z][a-z0-9-]*
            capabilities=CapabilitySet(),  # declared, checked against the provider
            support_level=SupportLevel.PREVIEW,  # available | preview | planned | evaluating
            settings=(
                SettingSpec(
                    env="TINYBOX_DIR",
                    description="absolute directory holding one sub-directory per Session",
                    required=True,
                ),
                MAX_OUTPUT_BYTES_SETTING,  # the shared caps, read by the kit's readers
                MAX_READ_BYTES_SETTING,
            ),
            factory=_open_provider,  # called only when MANGO_SANDBOX=tinybox
            description="example provider: host directories, NOT an isolation boundary",
            quirks=(),  # contract deviations you cannot avoid, see Quirk
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
            cost=TargetCost.PROCESS,  # host processes: the profiles' full budget
        )
    )
