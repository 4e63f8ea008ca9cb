"""Tencent CubeSandbox provider for mango: the E2B protocol client with Cube's addressing.

CubeSandbox implements the E2B API behind its own control plane (CubeAPI)
and proxy (CubeProxy). This distribution reuses :mod:`mango_provider_e2b`
(no second protocol client) and adds what differs: Bearer authentication,
the key on the data plane too, the sandbox domain, and proxy-node routing
(dial ``CUBE_PROXY_NODE_IP:CUBE_PROXY_PORT_HTTP`` while ``Host`` keeps the
sandbox's virtual name). Select it with ``MANGO_SANDBOX=cube``.
"""

from mango_provider_cube.settings import open_cube_provider, read_cube_options

__all__ = ["open_cube_provider", "read_cube_options"]
