"""A fake's route to a server that a fake sandbox runs: a small HTTP reverse proxy.

A fake sandbox's commands are host processes, so a server "in the sandbox"
listens on a port of the host. A vendor's preview link, endpoint or server
proxy reaches it as the vendor's own proxy does (OpenSandbox's execd
forwards ``/proxy/{port}`` to ``127.0.0.1:{port}``, Daytona's proxy to the
sandbox's port): :func:`forward_to_port` sends the request on to
``127.0.0.1:{port}`` and streams the answer back. A limit of the fakes, not
of the vendors: every sandbox shares the host's ports, so the fake cannot
tell whose server listens there.
"""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp
from aiohttp import web

__all__ = ["HOP_BY_HOP", "forward_to_port"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that belong to one connection (RFC 9110 section 7.6.1), never forwarded."""
_CHUNK = 64 * 1024


async def forward_to_port(
    request: web.Request, port: int, path: str, *, drop: Iterable[str] = ()
) -> web.StreamResponse:
    """Send ``request`` to ``http://127.0.0.1:{port}/{path}`` (its query too) and stream back.

    ``drop`` names request headers the vendor's proxy strips (its own
    credentials). Nothing listening is a 502, as a gateway answers.
    """
    dropped = HOP_BY_HOP | {name.lower() for name in drop}
    headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
    url = f"http://127.0.0.1:{port}/{path.lstrip('/')}"
    body = await request.read() if request.body_exists else None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            upstream = await session.request(
                request.method,
                url,
                params=request.rel_url.query,
                headers=headers,
                data=body,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectionError:
            return web.Response(status=502, text=f"nothing listens on port {port}")
        async with upstream:
            answer = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await answer.prepare(request)
            async for chunk in upstream.content.iter_chunked(_CHUNK):
                await answer.write(chunk)
            await answer.write_eof()
            return answer
