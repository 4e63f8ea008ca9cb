"""The fake's egress enforcement: a forward proxy that applies each sandbox's policy.

The real egress sidecar enforces a sandbox's policy by name
(``enforcementMode: dns``): a denied name gets ``NXDOMAIN``, an allowed one
resolves. The fake's sandboxes are host processes in the host's network, so
the fake points their HTTP clients at this gateway instead (``http_proxy``
and friends, with the sandbox's id and a per-sandbox secret as proxy
credentials), and the gateway decides by the sidecar's rule
(:func:`egress_allows`): the first rule whose target matches wins, ``*.x``
matches the names under ``x`` but not ``x``, otherwise the default action;
a sandbox created without a policy (no sidecar) is unrestricted. A denied
name is answered as one that does not resolve (``502``). An allowed one is
resolved through :attr:`EgressGateway.upstream` (the fake's upstream DNS:
the names a test serves on 127.0.0.1), else by the host's resolver, and the
request is forwarded.

Limits of the fake, not of the protocol: only clients that honour the proxy
variables (``wget``, ``curl``, Python) are confined, and HTTPS tunnels
(``CONNECT``) are refused for every name.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import attrs
from aiohttp import web
from yarl import URL

from mango.fakes import FakeSandbox

__all__ = ["EgressGateway", "egress_allows"]

_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def _matches(target: str, name: str) -> bool:
    pattern = target.strip().lower()
    if not pattern:
        return False
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and name != pattern[2:]
    return pattern == name


def egress_allows(policy: Mapping[str, Any] | None, host: str) -> bool:
    """True if ``policy`` lets a sandbox resolve ``host`` (the sidecar's evaluation)."""
    if policy is None:
        return True
    name = host.lower().rstrip(".")
    for rule in policy.get("egress") or []:
        if _matches(str(rule.get("target", "")), name):
            return str(rule.get("action") or "deny").lower() == "allow"
    return str(policy.get("defaultAction") or "deny").lower() == "allow"


def _credentials(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    sandbox_id, sep, secret = decoded.partition(":")
    return (sandbox_id, secret) if sep else None


@attrs.define(eq=False)
class EgressGateway:
    """The proxy every fake sandbox's HTTP traffic goes through; started with the fake.

    ``sandbox(id)`` returns a live sandbox record or None; its ``extra``
    holds the policy the sidecar API manages.
    """

    sandbox: Callable[[str], FakeSandbox | None]
    upstream: dict[str, str] = attrs.field(factory=dict)
    """Host name -> address for the names a test serves (checked before the host's resolver)."""
    _runner: web.AppRunner | None = attrs.field(init=False, default=None)
    _client: aiohttp.ClientSession | None = attrs.field(init=False, default=None)
    _port: int = attrs.field(init=False, default=0)

    async def start(self) -> None:
        """Listen on 127.0.0.1 (an ephemeral port)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        self._client = aiohttp.ClientSession(
            trust_env=False, timeout=aiohttp.ClientTimeout(total=30)
        )

    async def stop(self) -> None:
        """Stop listening and close the upstream connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def environment(self, record: FakeSandbox) -> dict[str, str]:
        """The proxy variables of the commands of ``record``."""
        secret = record.extra.setdefault("gateway_secret", secrets.token_urlsafe(12))
        proxy = f"http://{record.id}:{secret}@127.0.0.1:{self._port}"
        names = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
        return {**dict.fromkeys(names, proxy), "no_proxy": "", "NO_PROXY": ""}

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        credentials = _credentials(request.headers.get("Proxy-Authorization"))
        record = self.sandbox(credentials[0]) if credentials is not None else None
        if (
            record is None
            or credentials is None
            or not secrets.compare_digest(credentials[1], str(record.extra.get("gateway_secret")))
        ):
            return web.Response(status=407, text="proxy authentication required")
        if request.method == "CONNECT":
            return web.Response(status=405, text="the fake's gateway does not tunnel HTTPS")
        url = request.url
        if not request.raw_path.startswith("http://") or not url.host:
            return web.Response(status=400, text="a proxy request needs an absolute http:// URL")
        policy = record.extra.get("policy")
        if not egress_allows(policy if isinstance(policy, dict) else None, url.host):
            return web.Response(status=502, text=f"could not resolve host {url.host} (denied)")
        return await self._upstream(request, url)

    async def _upstream(self, request: web.Request, url: URL) -> web.Response:
        assert self._client is not None  # noqa: S101 - only called while serving
        host = str(url.host).lower()
        target = url.with_host(self.upstream.get(host, host))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["Host"] = url.raw_authority
        try:
            async with self._client.request(
                request.method,
                str(target),
                headers=headers,
                data=await request.read(),
                allow_redirects=False,
            ) as answer:
                body = await answer.read()
                # The client decoded the body: its encoding no longer applies.
                dropped = {*_HOP_HEADERS, "content-encoding"}
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in dropped}
                return web.Response(status=answer.status, body=body, headers=kept)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return web.Response(status=502, text=f"upstream {host} unreachable: {exc}")
