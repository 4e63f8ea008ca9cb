"""Plugin entry of the built-in local provider: its pluggy hook implementations only.

The registration and the offline conformance target are declared with the
settings (:mod:`mango.local.settings`); the kit turns them into the hooks.
"""

from __future__ import annotations

from mango.local.settings import CONFORMANCE_TARGET, REGISTRATION
from mango.provider import hookimpl
from mango.provider.plugin import ProviderPlugin

__all__ = ["hookimpl", "mango_register_conformance_targets", "mango_register_providers"]

mango_register_providers, mango_register_conformance_targets = ProviderPlugin(
    REGISTRATION, CONFORMANCE_TARGET
).hooks()
