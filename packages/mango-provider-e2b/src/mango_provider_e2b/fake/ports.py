"""The fake's client-proxy routing of a sandbox's own ports (anything but envd's 49983).

E2B's client-proxy (e2b-dev/infra ``packages/shared/pkg/proxy/host.go``)
routes a request by its ``Host``, ``{port}-{sandboxID}.{domain}``, or, when
the host is an IP address, ``localhost`` or the shared ``sandbox.{domain}``,
by the headers ``E2b-Sandbox-Id`` and ``E2b-Sandbox-Port``. The fake is
reached as ``127.0.0.1`` (the shared ``E2B_SANDBOX_URL``), so it routes by
the headers: a request naming another port than envd's goes, before any
route of the fake's own, to the server its sandbox runs, which for the
fake's host-process sandboxes listens on ``127.0.0.1:{port}``
(:func:`mango.fakes.forward_to_port`). A sandbox that is paused or gone is
the proxy's 502 ``The sandbox was not found``; a port that is not a number
is its 400.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from mango.fakes import SERVICE_KEY, SandboxState, forward_to_port
from mango_provider_e2b.envd import ENVD_PORT

__all__ = ["SANDBOX_ID_HEADER", "SANDBOX_PORT_HEADER", "route_ports"]

SANDBOX_ID_HEADER = "E2b-Sandbox-Id"
SANDBOX_PORT_HEADER = "E2b-Sandbox-Port"
_DROPPED = (SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER, "X-API-Key", "Authorization", "Cookie")


@web.middleware
async def route_ports(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Send a request for a sandbox's port (by the routing headers) on to that port."""
    named = request.headers.get(SANDBOX_PORT_HEADER)
    if named is None or named == str(ENVD_PORT):
        return await handler(request)
    sandbox_id = request.headers.get(SANDBOX_ID_HEADER, "")
    if not sandbox_id:
        return web.json_response(
            {"message": f"Missing header: {SANDBOX_ID_HEADER}", "code": 400}, status=400
        )
    if not named.isdigit() or not 1 <= int(named) <= 65535:
        return web.json_response(
            {"message": f"invalid sandbox port {named!r}", "code": 400}, status=400
        )
    record = request.app[SERVICE_KEY].sandboxes.find(sandbox_id)
    if record is None or record.state is not SandboxState.RUNNING:
        return web.json_response(
            {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502},
            status=502,
        )
    return await forward_to_port(request, int(named), request.path, drop=_DROPPED)
