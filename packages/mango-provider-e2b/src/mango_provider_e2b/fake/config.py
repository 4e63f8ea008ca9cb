"""What a fake E2B is: its mode (E2B or CubeSandbox), credentials, domain, and the
settings that point mango at it."""

from __future__ import annotations

import urllib.parse

import attrs

__all__ = [
    "CUBE_MODE",
    "CUBE_REPORTED_ENVD_VERSION",
    "E2B_MODE",
    "STATE_DIR",
    "WORKSPACE",
    "FakeConfig",
    "mango_settings",
]

E2B_MODE = "e2b"
CUBE_MODE = "cube"
WORKSPACE = "/workspace"
"""The user's directory of a fake sandbox's file system."""
STATE_DIR = "/var/lib/mango"
"""The other directory a fake sandbox has: mango's own (background processes keep their
files there); paths below it in a command line are moved as ``/workspace`` is."""


CUBE_REPORTED_ENVD_VERSION = "0.2.0"
"""What CubeAPI reports as every sandbox's ``envdVersion`` (a constant in its sources)."""


@attrs.frozen
class FakeConfig:
    """How the fake behaves: vendor mode, credentials, domain, envd version, page size.

    ``envd_version`` is the version of the envd the fake's sandboxes run (its
    behaviour follows it: no raw uploads before 0.5.7); E2B reports it,
    CubeAPI always reports :data:`CUBE_REPORTED_ENVD_VERSION`. ``cube_nodes``
    is how many nodes a Cube-mode fake spreads its sandboxes over (its list's
    ``limit`` counts nodes, as CubeMaster's does). ``kill_resets_streams``:
    a killed sandbox's process streams are reset at once (``False``: they
    hang, as a connection to a vanished VM can, until the fake stops).
    ``connect_deadline``: seconds after which the edge cuts a ``Connect``
    stream (``None``: never), as E2B's does: a reconnect failing after two
    minutes is a known peer defect; the process runs on.
    """

    mode: str = E2B_MODE
    api_key: str | None = attrs.field(default="e2b_fake_key", repr=False)
    domain: str = "e2b.local"
    envd_version: str = "0.5.8"
    page_size: int = 100
    default_timeout: int = 300
    cube_nodes: int = 1
    kill_resets_streams: bool = True
    connect_deadline: float | None = None

    @property
    def reported_envd_version(self) -> str:
        """The ``envdVersion`` the control plane answers."""
        return CUBE_REPORTED_ENVD_VERSION if self.mode == CUBE_MODE else self.envd_version


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
