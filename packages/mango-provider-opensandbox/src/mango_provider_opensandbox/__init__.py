"""OpenSandbox provider for mango: one OpenSandbox sandbox per Session.

Select it with ``MANGO_SANDBOX=opensandbox`` and ``OPEN_SANDBOX_DOMAIN``.

* **Identity.** Each Session key's sandbox carries ownership metadata (the
  deployment namespace and a hash of the key); create lists by it first and
  adopts what a lost create made; attach checks it; destroy never attaches.
* **Exec.** Through execd's command event stream, output framed so it
  arrives byte-exact (:mod:`mango_provider_opensandbox.wire`), capped per
  stream, with timeout and cancellation that end the process tree and keep
  the sandbox.
* **Files.** Through execd's file API under the kit's path policy.
* **Limited network.** Deny-by-default egress with an allowlist, reconciled
  through the egress sidecar (:mod:`mango_provider_opensandbox.network`).

Settings are in :mod:`mango_provider_opensandbox.settings`; the fake server
used for offline conformance is :mod:`mango_provider_opensandbox.fake`.

The names below are loaded on first use: the plugin's entry point imports
this package on every mango command, and the protocol client (httpx,
stamina) is only worth importing when OpenSandbox is the provider selected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango_provider_opensandbox.layout import CAPABILITIES, DEFAULT_IMAGE
    from mango_provider_opensandbox.provider import DEFAULT_MAX_READ_BYTES, OpenSandboxProvider
    from mango_provider_opensandbox.sandbox import OpenSandboxSandbox
    from mango_provider_opensandbox.settings import (
        OpenSandboxSettings,
        open_opensandbox_provider,
        read_settings,
    )

_WHERE = {
    "CAPABILITIES": "mango_provider_opensandbox.layout",
    "DEFAULT_IMAGE": "mango_provider_opensandbox.layout",
    "DEFAULT_MAX_READ_BYTES": "mango.provider",
    "OpenSandboxProvider": "mango_provider_opensandbox.provider",
    "OpenSandboxSandbox": "mango_provider_opensandbox.sandbox",
    "OpenSandboxSettings": "mango_provider_opensandbox.settings",
    "open_opensandbox_provider": "mango_provider_opensandbox.settings",
    "read_settings": "mango_provider_opensandbox.settings",
}

__all__ = [
    "CAPABILITIES",
    "DEFAULT_IMAGE",
    "DEFAULT_MAX_READ_BYTES",
    "OpenSandboxProvider",
    "OpenSandboxSandbox",
    "OpenSandboxSettings",
    "open_opensandbox_provider",
    "read_settings",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
