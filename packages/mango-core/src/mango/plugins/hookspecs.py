"""Hook specifications of mango. Every hook is prefixed ``mango_``."""

from __future__ import annotations

import pluggy

from mango.domain.registry import ConformanceTargetRegistry, ProviderRegistry

hookspec = pluggy.HookspecMarker("mango")


@hookspec
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Add :class:`~mango.domain.registry.ProviderRegistration` objects with ``registry.add``.

    Must be cheap: import no SDK and read no credential here; do that in the
    registration's factory.
    """


@hookspec
def mango_register_conformance_targets(
    registry: ConformanceTargetRegistry,
) -> None:
    """Add offline :class:`~mango.domain.registry.ConformanceTarget` objects.

    Used by ``mango-conformance run NAME``.
    """
