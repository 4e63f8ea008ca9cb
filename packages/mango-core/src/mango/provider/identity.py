"""A provider's fixed identity: its name and capabilities, declared once on the class.

Every provider reports the same two values as its registration; declaring them
as class attributes of :class:`ProviderIdentity` gives the ``name`` and
``capabilities`` properties the port asks for, so no provider writes them again::

    class AcmeProvider(ProviderIdentity):
        provider_name = "acme"
        provider_capabilities = CapabilitySet.of(Capability.PACKAGE_SETUP)
"""

from __future__ import annotations

from typing import ClassVar

from mango.domain.capabilities import CapabilitySet

__all__ = ["ProviderIdentity"]


class ProviderIdentity:
    """Mixin: ``name`` and ``capabilities`` from class attributes."""

    provider_name: ClassVar[str]
    """The stable lowercase provider name (the registration's)."""
    provider_capabilities: ClassVar[CapabilitySet] = CapabilitySet()
    """What the provider implements (the registration's declaration)."""

    @property
    def name(self) -> str:
        """The provider name, as registered and persisted in references."""
        return self.provider_name

    @property
    def capabilities(self) -> CapabilitySet:
        """The declared capabilities; equal to the registration's."""
        return self.provider_capabilities
