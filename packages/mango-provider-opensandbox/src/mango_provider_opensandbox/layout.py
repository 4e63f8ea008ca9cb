"""Fixed names of the OpenSandbox wire protocol and of mango's layout inside a sandbox.

A light module (no httpx): the settings module, which the plugin's entry point
loads on every mango command, builds the registration from it.
"""

from __future__ import annotations

from mango.provider import Capability, CapabilitySet

__all__ = [
    "API_KEY_HEADER",
    "API_PREFIX",
    "CAPABILITIES",
    "DEFAULT_IMAGE",
    "EGRESS_AUTH_HEADER",
    "EGRESS_PORT",
    "ENTRYPOINT",
    "EXECD_PORT",
    "EXECD_TOKEN_HEADER",
    "NETWORK_LABEL",
    "PROVIDER_NAME",
    "ROOT",
    "STDIN_DIR",
]

PROVIDER_NAME = "opensandbox"
DEFAULT_IMAGE = "python:3.12-slim"
"""Image of sandboxes whose spec names none (``OPEN_SANDBOX_IMAGE``)."""
CAPABILITIES = CapabilitySet.of(
    Capability.PACKAGE_SETUP,
    Capability.LIMITED_NETWORK,
    Capability.FILE_API,
    Capability.BACKGROUND_PROCESSES,
    Capability.PAUSE,
    Capability.EXPOSED_PORTS,
)
"""Package setup (through exec), limited network (the egress sidecar), the file API (execd),
background processes (execd's background commands under the kit's supervisor), pause (the
lifecycle API's pause and resume) and exposed ports (the endpoints the server resolves)."""
API_PREFIX = "/v1"
"""The lifecycle API lives under ``<OPEN_SANDBOX_DOMAIN>/v1``."""
API_KEY_HEADER = "OPEN-SANDBOX-API-KEY"
"""The lifecycle API's credential header (never sent to a sandbox directly)."""
EXECD_PORT = 44772
"""execd, the in-sandbox command and file daemon."""
EGRESS_PORT = 18080
"""The egress sidecar that enforces a sandbox's network policy."""
EXECD_TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"  # noqa: S105 - a header name, not a secret
EGRESS_AUTH_HEADER = "OPENSANDBOX-EGRESS-AUTH"
ROOT = "/workspace"
"""The workspace root inside every sandbox (commands' working directory)."""
STDIN_DIR = "/var/lib/mango/stdin"
"""Adapter-owned directory for stdin too large to travel in the command line."""
ENTRYPOINT = ("tail", "-f", "/dev/null")
"""The idle main process of a sandbox; commands run beside it through execd."""
NETWORK_LABEL = "io.mango.network"
"""Metadata with the network mode a sandbox was created with (``none``, ``bridge``, ``limited``)."""
