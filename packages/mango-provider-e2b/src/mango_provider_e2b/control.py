"""The E2B control plane (also CubeSandbox's): create, list, get, connect, timeout, kill.

Wire facts (E2B API, which CubeAPI implements):

* ``POST /sandboxes`` ``{"templateID", "timeout", "metadata", "autoPause", ...}`` → 201
  with ``sandboxID``, ``envdVersion``, ``envdAccessToken``, ``domain``;
* ``GET /v2/sandboxes?metadata=<k=v&k=v>&state=running,paused&limit=N[&nextToken=T]``
  → a JSON array, the next page's token in the ``X-Next-Token`` header;
* ``GET /sandboxes/{id}`` → the sandbox's detail (``state``, ``metadata``, ...);
* ``POST /sandboxes/{id}/connect`` ``{"timeout"}`` → 200 (running) or 201
  (resumed from pause) with the create response's shape;
* ``POST /sandboxes/{id}/timeout`` ``{"timeout"}`` → 204: the sandbox ends (or
  pauses) that many seconds from now;
* ``DELETE /sandboxes/{id}`` → 204; 404 when it is already gone.

The two vendors differ in authentication and in how the create body spells
network access; :class:`Dialect` holds the differences.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import httpx

from mango.provider import ConfigurationError
from mango.provider.http import ApiClient, RemoteRejected, RemoteUnavailable
from mango.provider.ownership import listed_time

__all__ = [
    "CUBE",
    "E2B",
    "LIST_PAGE_SIZE",
    "ControlPlane",
    "Dialect",
    "SandboxInfo",
    "SandboxState",
]

LIST_PAGE_SIZE = 100
"""Sandboxes asked for per list page."""
_MAX_PAGES = 1000


class SandboxState:
    """The ``state`` values of a listed sandbox."""

    RUNNING = "running"
    PAUSED = "paused"
    GONE = frozenset({"killing", "killed", "deleting", "deleted"})
    """States that mean a sandbox is being or has been killed. E2B's API answers
    a killed sandbox's ``GET`` with 404 and names only the two states above; an
    implementation that keeps the record a while may name one of these."""


@attrs.frozen
class Dialect:
    """What differs between E2B and CubeSandbox on the control plane."""

    provider: str
    """The mango provider name (``e2b``, ``cube``)."""
    bearer: bool
    """Authenticate with ``Authorization: Bearer`` (Cube) instead of ``X-API-Key`` (E2B)."""
    snake_case_internet: bool
    """E2B always sends ``allow_internet_access``; Cube sends ``allowInternetAccess: false``
    only when the sandbox gets no network."""
    data_plane_api_key: bool
    """Cube's proxy authenticates data-plane requests with ``X-API-Key`` too."""

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The control-plane credential headers (none without a key)."""
        if not api_key:
            return {}
        return {"Authorization": f"Bearer {api_key}"} if self.bearer else {"X-API-Key": api_key}


E2B = Dialect(provider="e2b", bearer=False, snake_case_internet=True, data_plane_api_key=False)
"""E2B's managed service."""
CUBE = Dialect(provider="cube", bearer=True, snake_case_internet=False, data_plane_api_key=True)
"""Tencent CubeSandbox (self-hosted, E2B-compatible)."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@attrs.frozen
class SandboxInfo:
    """What mango keeps of a sandbox record (create, connect, get and list answers)."""

    sandbox_id: str
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    state: str | None = None
    envd_version: str | None = None
    envd_access_token: str | None = attrs.field(default=None, repr=False)
    traffic_access_token: str | None = attrs.field(default=None, repr=False)
    domain: str | None = None
    started_at: datetime | None = None
    """``startedAt``: when the sandbox was made (lists and gets say it)."""

    @classmethod
    def from_json(cls, value: object, *, operation: str) -> SandboxInfo:
        """Read one sandbox object; :class:`RemoteUnavailable` if it is not one."""
        if not isinstance(value, dict) or not _text(value.get("sandboxID")):
            raise RemoteUnavailable(f"{operation}: the answer is not a sandbox record")
        metadata = value.get("metadata")
        return cls(
            sandbox_id=value["sandboxID"],
            metadata={
                str(key): str(item) for key, item in metadata.items() if isinstance(item, str)
            }
            if isinstance(metadata, dict)
            else {},
            state=_text(value.get("state")),
            envd_version=_text(value.get("envdVersion")),
            envd_access_token=_text(value.get("envdAccessToken")),
            traffic_access_token=_text(value.get("trafficAccessToken")),
            domain=_text(value.get("domain")),
            started_at=listed_time(value.get("startedAt")),
        )


def _json(response: httpx.Response, operation: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise RemoteUnavailable(f"{operation}: the answer is not JSON") from None


def whole_seconds(seconds: float) -> int:
    """A duration rounded up to whole seconds (at least 1), as the API takes it."""
    return max(1, math.ceil(seconds))


def _path_id(sandbox_id: str) -> str:
    # A ref comes from storage: quote it, so it can only ever name one path segment.
    return urllib.parse.quote(sandbox_id, safe="")


@attrs.define(eq=False)
class ControlPlane:
    """Calls of one vendor's control plane through one :class:`ApiClient` (one pool)."""

    api: ApiClient
    dialect: Dialect

    async def create(
        self,
        *,
        template: str,
        metadata: Mapping[str, str],
        timeout: float,
        internet: bool,
    ) -> SandboxInfo:
        """``POST /sandboxes``: a new sandbox that pauses (not dies) when its timeout passes.

        Not retried (a POST that creates): the caller looks the sandbox up by
        its metadata after a failure. A 400/404 naming the template is a
        :class:`ConfigurationError`.
        """
        body: dict[str, Any] = {
            "templateID": template,
            "timeout": whole_seconds(timeout),
            "metadata": dict(metadata),
            "autoPause": True,
            "autoPauseMemory": False,
            "autoResume": {"enabled": False},
            "secure": True,
        }
        if self.dialect.snake_case_internet:
            body["allow_internet_access"] = internet
        elif not internet:
            body["allowInternetAccess"] = False
        operation = f"{self.dialect.provider}: create sandbox"
        try:
            response = await self.api.request(
                "POST", "/sandboxes", operation=operation, json=body, expected=(404,)
            )
        except RemoteRejected as exc:
            if "template" in exc.excerpt.lower():
                raise self._template_error(template, exc.excerpt) from None
            raise
        if response.status_code == 404:
            raise self._template_error(template, response.text[:200])
        return SandboxInfo.from_json(_json(response, operation), operation=operation)

    def _template_error(self, template: str, excerpt: str) -> ConfigurationError:
        env = "CUBE_TEMPLATE_ID" if self.dialect.bearer else "E2B_TEMPLATE_ID"
        return ConfigurationError(
            f"{self.dialect.provider}: the service does not know template {template!r}: "
            f"{excerpt.strip()[:160]}",
            hint=f"check {env}",
        )

    async def list(
        self, metadata: Mapping[str, str], *, limit: int = LIST_PAGE_SIZE
    ) -> list[SandboxInfo]:
        """Every running or paused sandbox whose metadata has all of ``metadata``.

        Follows ``X-Next-Token`` pages (a repeated token is a protocol error)
        and re-checks the filter here, so a service that ignores it cannot
        hand back a stranger's sandbox.
        """
        operation = f"{self.dialect.provider}: list sandboxes"
        params: dict[str, str | int] = {"state": "running,paused", "limit": limit}
        if metadata:
            params["metadata"] = urllib.parse.urlencode(dict(metadata))
        found: list[SandboxInfo] = []
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            response = await self.api.request(
                "GET", "/v2/sandboxes", operation=operation, params=params
            )
            page = _json(response, operation)
            if not isinstance(page, list):
                raise RemoteUnavailable(f"{operation}: the answer is not a list")
            for item in page:
                info = SandboxInfo.from_json(item, operation=operation)
                if all(info.metadata.get(key) == value for key, value in metadata.items()):
                    found.append(info)
            token = response.headers.get("x-next-token", "").strip()
            if not token:
                return found
            if token in seen:
                raise RemoteUnavailable(f"{operation}: the service repeated a page token")
            seen.add(token)
            params["nextToken"] = token
        raise RemoteUnavailable(f"{operation}: more than {_MAX_PAGES} pages")

    async def probe(self) -> None:
        """One authenticated list call of at most one sandbox (a health check)."""
        await self.api.request(
            "GET",
            "/v2/sandboxes",
            operation=f"{self.dialect.provider}: list sandboxes",
            params={"limit": 1},
        )

    async def get(self, sandbox_id: str) -> SandboxInfo:
        """``GET /sandboxes/{id}``; :class:`SandboxNotFound` on 404."""
        operation = f"{self.dialect.provider}: get sandbox"
        response = await self.api.request(
            "GET", f"/sandboxes/{_path_id(sandbox_id)}", operation=operation, sandbox_id=sandbox_id
        )
        return SandboxInfo.from_json(_json(response, operation), operation=operation)

    async def connect(self, sandbox_id: str, *, timeout: float) -> SandboxInfo:
        """``POST /sandboxes/{id}/connect``: resume if paused, live at least ``timeout`` more.

        Idempotent (connecting twice is connecting), so it is retried.
        :class:`SandboxNotFound` on 404.
        """
        operation = f"{self.dialect.provider}: connect sandbox"
        response = await self.api.request(
            "POST",
            f"/sandboxes/{_path_id(sandbox_id)}/connect",
            operation=operation,
            sandbox_id=sandbox_id,
            idempotent=True,
            json={"timeout": whole_seconds(timeout)},
        )
        return SandboxInfo.from_json(_json(response, operation), operation=operation)

    async def set_timeout(self, sandbox_id: str, timeout: float) -> None:
        """``POST /sandboxes/{id}/timeout``: the sandbox pauses ``timeout`` seconds from now."""
        await self.api.request(
            "POST",
            f"/sandboxes/{_path_id(sandbox_id)}/timeout",
            operation=f"{self.dialect.provider}: extend sandbox timeout",
            sandbox_id=sandbox_id,
            idempotent=True,
            json={"timeout": whole_seconds(timeout)},
        )

    async def kill(self, sandbox_id: str) -> bool:
        """``DELETE /sandboxes/{id}``; ``False`` if it was already gone (idempotent)."""
        response = await self.api.request(
            "DELETE",
            f"/sandboxes/{_path_id(sandbox_id)}",
            operation=f"{self.dialect.provider}: kill sandbox",
            expected=(404,),
        )
        return response.status_code != 404

    async def aclose(self) -> None:
        """Close the control-plane pool."""
        await self.api.aclose()
