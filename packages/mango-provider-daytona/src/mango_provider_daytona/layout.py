"""The Daytona provider's fixed names and defaults.

A light module (no httpx): the settings module, which the plugin's entry point
loads on every mango command, builds the registration from it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_AUTO_PAUSE_MINUTES", "DEFAULT_START_TIMEOUT", "PROVIDER_NAME"]

PROVIDER_NAME = "daytona"
DEFAULT_AUTO_PAUSE_MINUTES = 15
"""Minutes of inactivity after which Daytona pauses a sandbox (``DAYTONA_AUTO_PAUSE_MINUTES``)."""
DEFAULT_START_TIMEOUT = 300.0
"""Seconds to wait for a sandbox to reach ``started`` (an archived one is restored first)."""
