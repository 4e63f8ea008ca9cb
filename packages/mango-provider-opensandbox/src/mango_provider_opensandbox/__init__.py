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
"""

from mango_provider_opensandbox.provider import (
    CAPABILITIES,
    DEFAULT_IMAGE,
    DEFAULT_MAX_READ_BYTES,
    OpenSandboxProvider,
)
from mango_provider_opensandbox.sandbox import OpenSandboxSandbox
from mango_provider_opensandbox.settings import (
    OpenSandboxSettings,
    open_opensandbox_provider,
    read_settings,
)

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
