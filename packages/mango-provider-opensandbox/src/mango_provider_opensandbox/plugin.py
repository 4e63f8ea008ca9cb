"""Entry point of the mango plugin ``opensandbox``: its pluggy hook implementations only.

What it registers (the provider and its offline conformance target) is
declared in :mod:`mango_provider_opensandbox.settings`.
"""

from __future__ import annotations

from mango.provider import hookimpl
from mango.provider.plugin import ProviderPlugin
from mango_provider_opensandbox.settings import CONFORMANCE_TARGET, REGISTRATION

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

mango_register_providers, mango_register_conformance_targets = ProviderPlugin(
    REGISTRATION, CONFORMANCE_TARGET
).hooks()
