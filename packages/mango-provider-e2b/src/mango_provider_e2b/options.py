"""The options of an envd-based provider (E2B or Cube), validated, and the setting parsers.

:class:`EnvdOptions` is what :class:`~mango_provider_e2b.provider.E2BProvider`
runs on; the E2B and Cube distributions each read their own environment
variables into one. The API key is kept out of ``repr`` and out of every
message.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from typing import TYPE_CHECKING

import attrs

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_READ_BYTES,
    MAX_READ_BYTES_ENV,
    ConfigurationError,
    max_read_bytes,
)

if TYPE_CHECKING:
    # Only a type here: the settings readers use this module, and the control
    # plane (httpx) is imported only when a provider is opened.
    from mango_provider_e2b.control import Dialect

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_READ_BYTES",
    "MAX_READ_BYTES_ENV",
    "EnvdOptions",
    "api_url_setting",
    "max_read_bytes",
    "parse_duration",
]

DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds of idleness after which a sandbox pauses (``5m``)."""
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(name: str, text: str) -> float:
    """Seconds from a Go-style duration (``90s``, ``5m``, ``1h30m``) or a bare number of seconds.

    Raises :class:`ConfigurationError` naming ``name`` unless the result is positive.
    """
    value = text.strip()
    seconds: float | None = None
    try:
        seconds = float(value)
    except ValueError:
        position, total = 0, 0.0
        while position < len(value):
            match = _DURATION.match(value, position)
            if match is None:
                break
            total += float(match.group(1)) * _UNITS[match.group(2)]
            position = match.end()
        if value and position == len(value):
            seconds = total
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(
            f"{name} must be a positive duration such as 300, 90s, 5m or 1h30m, got {text!r}"
        )
    return seconds


def api_url_setting(name: str, text: str) -> str:
    """An http(s) base URL with a host, trailing ``/`` removed; :class:`ConfigurationError` else."""
    value = text.strip().rstrip("/")
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError(f"{name} must be an http(s) URL with a host, got {value!r}")
    if parsed.query or parsed.fragment or parsed.username or parsed.password:
        raise ConfigurationError(f"{name} must not carry a query, fragment or credentials")
    return value


def _scheme(_instance: object, _attribute: object, value: str) -> None:
    if value not in ("http", "https"):
        raise ConfigurationError(f"the envd scheme must be http or https, got {value!r}")


@attrs.frozen
class EnvdOptions:
    """Everything an envd-based provider needs, validated by the settings readers."""

    dialect: Dialect
    api_url: str
    """Control-plane base URL (no trailing slash)."""
    template: str
    """Template of sandboxes whose spec names no ``image``."""
    domain: str
    """The sandboxes' domain when the service's answer names none."""
    api_key: str | None = attrs.field(default=None, repr=False)
    envd_scheme: str = attrs.field(default="https", validator=_scheme)
    shared_envd_url: str | None = None
    """One URL for every sandbox's envd, routed by ``E2b-Sandbox-Id`` (``E2B_SANDBOX_URL``)."""
    proxy_host: str | None = None
    """Dial every data-plane connection here, keeping the virtual host (``CUBE_PROXY_NODE_IP``)."""
    proxy_port: int = 80
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES
    request_timeout: float = 30.0
    """httpx's per-operation timeout for control-plane calls and file transfers."""
    pause_memory: bool = True
    """E2B: an idle sandbox's auto-pause keeps memory and disk (``E2B_AUTO_PAUSE_MODE=full``);
    ``False`` keeps the filesystem only and resuming cold-boots it (``filesystem``)."""

    @property
    def provider(self) -> str:
        """The provider name (``e2b`` or ``cube``)."""
        return self.dialect.provider

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values to blank from any message."""
        return (self.api_key,) if self.api_key else ()
