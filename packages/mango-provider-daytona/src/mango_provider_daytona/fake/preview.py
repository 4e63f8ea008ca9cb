"""The fake's preview links: ``GET /sandbox/{id}/ports/{port}/preview-url`` and its proxy.

Daytona answers ``{"sandboxId", "url", "token"}`` (the SDK's
``PortPreviewUrl``); its proxy serves ``url`` and, for a private sandbox,
wants the token in ``X-Daytona-Preview-Token`` (or the API key as a bearer
token), else 401. The real URL is ``https://{port}-{id}.<proxy domain>``,
routed by host name; the fake answers a URL under its own address,
``/preview/{id}/{port}``, which a client uses as it is (the URL is the
server's to choose). Its sandboxes are host processes, so the proxy sends the
request on to ``127.0.0.1:{port}`` (:func:`mango.fakes.forward_to_port`),
without the token or the API key.
"""

from __future__ import annotations

import secrets

from aiohttp import web

from mango.fakes import forward_to_port
from mango_provider_daytona.fake.state import DaytonaState, error
from mango_provider_daytona.layout import PREVIEW_TOKEN_HEADER

__all__ = ["PreviewRoutes"]


class PreviewRoutes(DaytonaState):
    """The preview-url route (behind the API key) and the preview proxy (behind the token)."""

    def preview_token(self, sandbox_id: str) -> str:
        """The sandbox's preview token (made on first use; one per sandbox, as Daytona's)."""
        record = self._service.sandboxes.get(sandbox_id)
        token = record.extra.get("preview_token")
        if not isinstance(token, str):
            token = record.extra["preview_token"] = secrets.token_hex(16)
        return token

    async def preview_url(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        try:
            port = int(request.match_info["port"])
        except ValueError:
            return error(400, "Invalid port")
        if not 1 <= port <= 65535:
            return error(400, "Invalid port")
        url = f"{request.scheme}://{request.host}/preview/{record.id}/{port}"
        return web.json_response(
            {"sandboxId": record.id, "url": url, "token": self.preview_token(record.id)}
        )

    async def preview(self, request: web.Request) -> web.StreamResponse:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        if not record.extra.get("public"):
            given = request.headers.get(PREVIEW_TOKEN_HEADER, "")
            bearer = request.headers.get("Authorization") == f"Bearer {self.api_key}"
            if not bearer and not secrets.compare_digest(given, self.preview_token(record.id)):
                return error(401, "Unauthorized")
        if self.state(record) != "started":
            return error(400, f"Sandbox is {self.state(record)}")
        drop = (PREVIEW_TOKEN_HEADER, "authorization", "cookie")
        port = int(request.match_info["port"])
        return await forward_to_port(request, port, request.match_info.get("tail", ""), drop=drop)
