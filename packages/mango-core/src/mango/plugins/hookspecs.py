"""Hook specifications of mango. Every hook is prefixed ``mango_``."""

from __future__ import annotations

import pluggy

from mango.domain.registry import ConformanceTargetRegistry, ProviderRegistry

hookspec = pluggy.HookspecMarker("mango")


@hookspec
def mango_register_providers(registry: ProviderRegistry) -> None:
    """Add :class:`~mango.domain.registry.ProviderRegistration` objects with ``registry.add``.

    Must be cheap: import no SDK or HTTP client and read no setting here; do
    that in the registration's factory, which reads its settings from the
    ``ProviderContext.environ`` it is given (never ``os.environ``).
    """


@hookspec
def mango_register_conformance_targets(
    registry: ConformanceTargetRegistry,
) -> None:
    """Add offline :class:`~mango.domain.registry.ConformanceTarget` objects.

    Used by ``mango-conformance run NAME``.
    """
