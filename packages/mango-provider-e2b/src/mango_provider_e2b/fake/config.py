"""What a fake E2B is: its mode (E2B or CubeSandbox), credentials, domain, and the
settings that point mango at it."""

from __future__ import annotations

import urllib.parse

import attrs

__all__ = ["CUBE_MODE", "E2B_MODE", "WORKSPACE", "FakeConfig", "mango_settings"]

E2B_MODE = "e2b"
CUBE_MODE = "cube"
WORKSPACE = "/workspace"
"""The one directory of a fake sandbox's file system."""


@attrs.frozen
class FakeConfig:
    """How the fake behaves: vendor mode, credentials, domain, envd version, page size."""

    mode: str = E2B_MODE
    api_key: str | None = attrs.field(default="e2b_fake_key", repr=False)
    domain: str = "e2b.local"
    envd_version: str = "0.5.8"
    page_size: int = 100
    default_timeout: int = 300


def mango_settings(url: str, config: FakeConfig) -> dict[str, str]:
    """The settings that point mango's provider (``e2b`` or ``cube``, by mode) at a fake at ``url``.

    What a deployment exports: ``MANGO_SANDBOX`` and the provider's documented
    variables (the API key included: the fake's own, never a real one).
    """
    address = urllib.parse.urlsplit(url)
    key = config.api_key or ""
    if config.mode == CUBE_MODE:
        return {
            "MANGO_SANDBOX": "cube",
            "CUBE_API_URL": url,
            "CUBE_TEMPLATE_ID": "base",
            "CUBE_API_KEY": key,
            "CUBE_SANDBOX_DOMAIN": config.domain,
            "CUBE_PROXY_NODE_IP": address.hostname or "127.0.0.1",
            "CUBE_PROXY_PORT_HTTP": str(address.port or 80),
            "CUBE_PROXY_SCHEME": "http",
        }
    return {
        "MANGO_SANDBOX": "e2b",
        "E2B_API_URL": url,
        "E2B_SANDBOX_URL": url,
        "E2B_API_KEY": key,
    }
