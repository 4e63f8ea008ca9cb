"""What the control-plane and envd routes share: error replies, auth, envd routing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, SandboxState
from mango_provider_e2b.fake.config import CUBE_MODE, FakeConfig

if TYPE_CHECKING:
    from mango_provider_e2b.fake.service import E2BFakeService

__all__ = ["PROCESSES", "Reply", "Routes", "api_error", "as_object", "connect_error", "replying"]

PROCESSES = "processes"
"""The key of a sandbox's process table in its record's ``extra``."""
_CONNECT_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "resource_exhausted": 429,
    "internal": 500,
    "unknown": 500,
    "unimplemented": 501,
    "unavailable": 503,
    "deadline_exceeded": 504,
}


class Reply(Exception):
    """A finished error response, raised out of a helper."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def api_error(status: int, message: str) -> Reply:
    """The control plane's error: ``{"code", "message"}`` with the HTTP status."""
    return Reply(web.json_response({"code": status, "message": message}, status=status))


def connect_error(code: str, message: str) -> Reply:
    """A Connect error of envd (a unary call's: the JSON body, the code's HTTP status)."""
    return Reply(
        web.json_response({"code": code, "message": message}, status=_CONNECT_STATUS[code])
    )


def as_object(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def replying(handler: Any) -> Any:
    """``handler``, answering a :class:`Reply` raised inside it with its response."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except Reply as reply:
            return reply.response
        return response

    return wrapped


@attrs.define(eq=False)
class Routes:
    """The base of the route groups: the service, its config, auth and envd routing."""

    service: E2BFakeService

    @property
    def config(self) -> FakeConfig:
        """The service's :class:`FakeConfig`."""
        return self.service.config

    def authenticate(self, request: web.Request, *, data_plane: bool = False) -> None:
        """Check the API key by mode (Cube: Bearer or ``X-API-Key``); 401 otherwise.

        ``data_plane``: an envd call, which E2B authenticates by the sandbox's
        access token alone and Cube by the API key as well.
        """
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("X-API-Key")
        if self.config.mode == CUBE_MODE:
            bearer = request.headers.get("Authorization", "")
            if bearer.startswith("Bearer ") and bearer.removeprefix("Bearer ") == key:
                return
        elif data_plane:
            return  # E2B's envd is reached with the sandbox's access token, not the API key
        if given != key:
            raise api_error(401, "Invalid API key")

    async def json_body(self, request: web.Request) -> dict[str, Any]:
        """The request's JSON object (an empty body is ``{}``); 400 otherwise."""
        try:
            body = await request.json() if await request.read() else {}
        except ValueError:
            raise api_error(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise api_error(400, "the body is not a JSON object")
        return body

    def envd_id(self, request: web.Request) -> str | None:
        """The sandbox an envd call names: ``E2b-Sandbox-Id``, or Host ``49983-<id>.<domain>``."""
        header = request.headers.get("E2b-Sandbox-Id")
        if header:
            return header
        host = request.host.rsplit(":", 1)[0] if request.host.count(":") == 1 else request.host
        prefix, _, domain = host.partition(".")
        port, dash, sandbox_id = prefix.partition("-")
        if dash and port.isdigit() and sandbox_id and domain == self.config.domain:
            return sandbox_id
        return None

    def envd_record(self, request: web.Request) -> FakeSandbox:
        """The running sandbox an envd call may use (E2B proxy's 502 if not; then its auth)."""
        sandbox_id = self.envd_id(request)
        if sandbox_id is None:
            raise api_error(400, "no sandbox named (E2b-Sandbox-Id or Host)")
        record = self.service.sandboxes.find(sandbox_id)
        if record is None or record.state is not SandboxState.RUNNING:
            # E2B's proxy: a deleted or paused sandbox is "not found" with a 502.
            raise Reply(
                web.json_response(
                    {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502},
                    status=502,
                )
            )
        if self.config.mode == CUBE_MODE:
            self.authenticate(request, data_plane=True)
        if request.headers.get("X-Access-Token") != record.token:
            raise connect_error("unauthenticated", "invalid or missing X-Access-Token")
        return record
