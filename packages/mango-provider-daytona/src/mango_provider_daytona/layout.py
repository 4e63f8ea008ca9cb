"""The Daytona provider's fixed names and defaults.

A light module (no httpx): the settings module, which the plugin's entry point
loads on every mango command, builds the registration from it.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_AUTO_PAUSE_MINUTES",
    "DEFAULT_START_TIMEOUT",
    "PREVIEW_TOKEN_HEADER",
    "PROVIDER_NAME",
]

PROVIDER_NAME = "daytona"
DEFAULT_AUTO_PAUSE_MINUTES = 15
"""Minutes of inactivity after which Daytona pauses a sandbox (``DAYTONA_AUTO_PAUSE_MINUTES``)."""
DEFAULT_START_TIMEOUT = 300.0
"""Seconds to wait for a sandbox to reach ``started`` (an archived one is restored first)."""
PREVIEW_TOKEN_HEADER = "X-Daytona-Preview-Token"  # noqa: S105 - a header name, not a secret
"""The header Daytona's preview proxy reads a private sandbox's preview token from."""
