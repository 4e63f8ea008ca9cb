"""The E2B control plane (also CubeSandbox's): create, list, get, connect, timeout, pause, kill.

Wire facts (E2B API, which CubeAPI implements in part):

* ``POST /sandboxes`` ``{"templateID", "timeout", "metadata", "autoPause", ...}`` → 201
  with ``sandboxID``, ``envdVersion``, ``envdAccessToken``, ``domain``;
* ``GET /v2/sandboxes?metadata=<k=v&k=v>&state=running,paused&limit=N[&nextToken=T]``
  → a JSON array, the next page's token in the ``X-Next-Token`` header;
* ``GET /sandboxes/{id}`` → the sandbox's detail (``state``, ``metadata``, ...);
  404 only when the sandbox is neither running nor paused (a confirmed not-found);
* ``POST /sandboxes/{id}/connect`` ``{"timeout"}`` → 200 (running) or 201
  (resumed from pause) with the create response's shape; 404 as ``GET``;
* ``POST /sandboxes/{id}/timeout`` ``{"timeout"}`` → 204: the sandbox ends (or
  pauses) that many seconds from now. E2B answers 404 for a *paused* sandbox
  too (e2b-dev/infra ``sandbox_timeout.go`` looks at running sandboxes only),
  so that 404 is confirmed by a ``GET`` before it means anything;
* ``POST /sandboxes/{id}/pause`` → 204 (paused with memory and filesystem:
  its processes are frozen, and a resume, which ``connect`` is, continues
  them), 409 if it is paused already, 404 as ``GET``; CubeAPI answers the
  same (``handlers/sandboxes.rs``: 204, 404, 409 "cannot be paused"), and its
  ``connect`` resumes a paused sandbox too (``services/sandboxes.rs``);
* ``DELETE /sandboxes/{id}`` → 204; 404 when it is already gone.

The two vendors differ in authentication, in what their create call reads
and in lifetime; :class:`Dialect` holds the differences. What CubeAPI does
(TencentCloud/CubeSandbox ``CubeAPI/src/models/mod.rs`` and
``services/sandboxes.rs``): its ``NewSandbox`` reads ``templateID``,
``timeout``, ``autoPause``, ``autoResume``, ``secure``,
``allow_internet_access`` (snake case only), ``network``, ``metadata``,
``envVars``, ``mcp`` and ``volumeMounts`` and ignores any other field (such as
``autoPauseMemory``, ``allowInternetAccess`` or the SDK's ``lifecycle``); of
those, create passes on only ``timeout`` (CubeMaster's deadline for the create
call itself), ``allow_internet_access``/``network``, ``metadata`` and the
template. CubeMaster keeps no lifetime for a sandbox: nothing pauses or kills
an idle one, and ``/sandboxes/{id}/timeout`` reaches a CubeMaster route that
does not exist (HTTP 500). Its list asks CubeMaster for the sandboxes of the
first ``limit`` *nodes* and filters them afterwards; ``nextToken`` is ignored
and no ``X-Next-Token`` is sent. Every answer says ``envdVersion: "0.2.0"``
(a constant), whatever envd the template has.
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
from mango.provider.http import ApiClient, ProtocolError, RemoteRejected, json_answer
from mango.provider.ownership import listed_time

__all__ = [
    "CUBE",
    "CUBE_LIST_NODES",
    "E2B",
    "LIST_PAGE_SIZE",
    "ControlPlane",
    "Dialect",
    "SandboxInfo",
    "SandboxState",
]

LIST_PAGE_SIZE = 100
"""Sandboxes asked for per list page."""
CUBE_LIST_NODES = 10_000
"""The ``limit`` of Cube's one list call: CubeMaster lists the sandboxes of that many nodes."""
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
    data_plane_api_key: bool
    """Cube's proxy authenticates data-plane requests with ``X-API-Key`` too."""
    lifetime: bool
    """The service keeps a lifetime per sandbox (E2B: ``timeout``, auto-pause when it passes,
    ``/timeout`` to extend it). Cube keeps none: its sandboxes live until deleted."""
    paged_list: bool
    """``GET /v2/sandboxes`` pages with ``X-Next-Token`` (E2B); Cube answers one list."""
    exposes_ports: bool = False
    """``exposed-ports``: the service's proxy routes any port of a sandbox for any client (E2B:
    ``{port}-{id}.{domain}``, or the shared sandbox URL with ``E2b-Sandbox-Id`` and
    ``E2b-Sandbox-Port``). Cube's is reached through a proxy node by virtual host, which
    mango dials itself (``CUBE_PROXY_NODE_IP``): no URL another client can use."""
    envd_version: str | None = None
    """The envd version to assume instead of the service's ``envdVersion`` (Cube reports a
    constant ``0.2.0``; CubeSandbox's base image builds envd 0.5.13, from e2b-dev/infra
    2026.16). ``None``: believe the service."""

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The control-plane credential headers (none without a key)."""
        if not api_key:
            return {}
        return {"Authorization": f"Bearer {api_key}"} if self.bearer else {"X-API-Key": api_key}


E2B = Dialect(
    provider="e2b",
    bearer=False,
    data_plane_api_key=False,
    lifetime=True,
    paged_list=True,
    exposes_ports=True,
)
"""E2B's managed service."""
CUBE = Dialect(
    provider="cube",
    bearer=True,
    data_plane_api_key=True,
    lifetime=False,
    paged_list=False,
    envd_version="0.5.13",
)
"""Tencent CubeSandbox (self-hosted, E2B-compatible in part; see the module docstring)."""


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
    end_at: datetime | None = None
    """``endAt``: when the service ends the sandbox unless its timeout is extended (gets)."""

    @classmethod
    def from_json(cls, value: object, *, operation: str) -> SandboxInfo:
        """Read one sandbox object; :class:`ProtocolError` if it is not one."""
        if not isinstance(value, dict) or not _text(value.get("sandboxID")):
            raise ProtocolError(f"{operation}: the answer is not a sandbox record")
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
            end_at=listed_time(value.get("endAt")),
        )


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
    pause_memory: bool = True
    """E2B: a timeout auto-pause keeps memory and disk (``autoPauseMemory``); ``False`` keeps
    the filesystem only (resuming cold-boots the sandbox)."""

    def create_body(
        self, *, template: str, metadata: Mapping[str, str], timeout: float, internet: bool
    ) -> dict[str, Any]:
        """The ``POST /sandboxes`` body of this dialect (see the module docstring)."""
        body: dict[str, Any] = {
            "templateID": template,
            "metadata": dict(metadata),
            # Both vendors read the snake-case key only (E2B's API spells it so; CubeAPI's
            # NewSandbox ignores allowInternetAccess).
            "allow_internet_access": internet,
        }
        if self.dialect.lifetime:
            body.update(
                timeout=whole_seconds(timeout),
                autoPause=True,
                autoPauseMemory=self.pause_memory,
                autoResume={"enabled": False},
                secure=True,
            )
        else:
            # CubeMaster reads it as the deadline of the create call itself: as long as
            # mango waits for the answer. Cube ignores the auto-pause fields: none is sent.
            body["timeout"] = whole_seconds(self.api.timeout)
        return body

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
        body = self.create_body(
            template=template, metadata=metadata, timeout=timeout, internet=internet
        )
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
        return SandboxInfo.from_json(
            json_answer(response, operation=operation, shape=dict), operation=operation
        )

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

        E2B: follows ``X-Next-Token`` pages (a repeated token is a protocol
        error). Cube: one call for the sandboxes of the first
        :data:`CUBE_LIST_NODES` nodes (CubeAPI has no paging). The filter is
        re-checked here, so a service that ignores it cannot hand back a
        stranger's sandbox.
        """
        operation = f"{self.dialect.provider}: list sandboxes"
        paged = self.dialect.paged_list
        params: dict[str, str | int] = {
            "state": "running,paused",
            "limit": limit if paged else CUBE_LIST_NODES,
        }
        if metadata:
            params["metadata"] = urllib.parse.urlencode(dict(metadata))
        found: list[SandboxInfo] = []
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            response = await self.api.request(
                "GET", "/v2/sandboxes", operation=operation, params=params
            )
            page = json_answer(response, operation=operation, shape=list)
            for item in page:
                info = SandboxInfo.from_json(item, operation=operation)
                if all(info.metadata.get(key) == value for key, value in metadata.items()):
                    found.append(info)
            token = response.headers.get("x-next-token", "").strip()
            if not token or not paged:
                return found
            if token in seen:
                raise ProtocolError(f"{operation}: the service repeated a page token")
            seen.add(token)
            params["nextToken"] = token
        raise ProtocolError(f"{operation}: more than {_MAX_PAGES} pages")

    async def probe(self) -> None:
        """One authenticated list call of at most one sandbox (a health check)."""
        operation = f"{self.dialect.provider}: list sandboxes"
        response = await self.api.request(
            "GET", "/v2/sandboxes", operation=operation, params={"limit": 1}
        )
        json_answer(response, operation=operation, shape=list)

    async def get(self, sandbox_id: str) -> SandboxInfo:
        """``GET /sandboxes/{id}``; :class:`SandboxNotFound` on 404 (a confirmed not-found)."""
        operation = f"{self.dialect.provider}: get sandbox"
        response = await self.api.request(
            "GET", f"/sandboxes/{_path_id(sandbox_id)}", operation=operation, sandbox_id=sandbox_id
        )
        return _record(response, sandbox_id, operation)

    async def connect(self, sandbox_id: str, *, timeout: float) -> SandboxInfo:
        """``POST /sandboxes/{id}/connect``: resume if paused, live at least ``timeout`` more.

        Idempotent (connecting twice is connecting), so it is retried.
        :class:`SandboxNotFound` on 404 (neither running nor paused: confirmed).
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
        return _record(response, sandbox_id, operation)

    async def pause(self, sandbox_id: str) -> bool:
        """``POST /sandboxes/{id}/pause`` (memory and filesystem); ``False`` if already paused.

        :class:`SandboxNotFound` on a 404 (confirmed: neither running nor
        paused). Idempotent: a repeat after a lost answer is the 409.
        """
        response = await self.api.request(
            "POST",
            f"/sandboxes/{_path_id(sandbox_id)}/pause",
            operation=f"{self.dialect.provider}: pause sandbox",
            sandbox_id=sandbox_id,
            idempotent=True,
            expected=(409,),
            json={},
        )
        return response.status_code != 409

    async def set_timeout(self, sandbox_id: str, timeout: float) -> bool:
        """``POST /sandboxes/{id}/timeout``: the sandbox pauses ``timeout`` seconds from now.

        ``False`` for a 404, which E2B also answers for a *paused* sandbox: the
        caller confirms it (:meth:`~mango.provider.remote.ProviderView.confirm_missing`).
        """
        response = await self.api.request(
            "POST",
            f"/sandboxes/{_path_id(sandbox_id)}/timeout",
            operation=f"{self.dialect.provider}: extend sandbox timeout",
            idempotent=True,
            expected=(404,),
            json={"timeout": whole_seconds(timeout)},
        )
        return response.status_code != 404

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


def _same_id(answered: str, asked: str) -> bool:
    # E2B accepts "<id>-<client id>" and answers with the short id (utils.ShortID).
    return (
        answered == asked
        or answered == asked.split("-", maxsplit=1)[0]
        or asked == answered.split("-", maxsplit=1)[0]
    )


def _record(response: httpx.Response, sandbox_id: str, operation: str) -> SandboxInfo:
    """The record of ``sandbox_id`` in ``response``: another sandbox's is a protocol error."""
    info = SandboxInfo.from_json(
        json_answer(response, operation=operation, shape=dict), operation=operation
    )
    if not _same_id(info.sandbox_id, sandbox_id):
        raise ProtocolError(
            f"{operation}: asked for sandbox {sandbox_id!r}, the answer is {info.sandbox_id!r}'s"
        )
    return info
