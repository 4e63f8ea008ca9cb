"""The OpenSandbox lifecycle API (``<domain>/v1``): sandboxes and their endpoints.

One :class:`LifecycleApi` per provider: list by metadata (every page),
create, get, delete, endpoint resolution. Errors come from the kit's map
(:mod:`mango.provider.http`): a 404 on a sandbox is :class:`SandboxNotFound`,
401/403 a :class:`ConfigurationError` that never repeats the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import attrs

from mango.provider import ProviderUnavailable
from mango.provider.http import ApiClient, RemoteUnavailable
from mango_provider_opensandbox.layout import API_PREFIX

__all__ = ["GONE_STATES", "MAX_PAGES", "PAGE_SIZE", "Endpoint", "LifecycleApi", "state_of"]

PAGE_SIZE = 100
MAX_PAGES = 1000
"""A bound on one listing (100 000 sandboxes); a server that pages on forever is an error."""
GONE_STATES = frozenset({"Stopping", "Terminated"})
"""States of a sandbox that is going or gone: its workspace is lost."""


def state_of(sandbox: Mapping[str, Any]) -> str:
    """``status.state`` of a sandbox document (``""`` if absent)."""
    status = sandbox.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    return state if isinstance(state, str) else ""


@attrs.frozen
class Endpoint:
    """Where a sandbox port answers and the headers every request to it must carry."""

    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RemoteUnavailable(
            f"{what}: the server answered {type(value).__name__}, not an object"
        )
    return value


@attrs.define(eq=False)
class LifecycleApi:
    """Calls of the lifecycle API over one :class:`ApiClient` (base ``<domain>``)."""

    client: ApiClient
    protocol: str = "http"
    """Scheme put in front of an endpoint the server returns without one."""

    async def list(self, metadata: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every sandbox whose metadata has all of ``metadata``, over every page.

        Raises :class:`RemoteUnavailable` on a pagination that does not advance.
        """
        found: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            response = await self.client.request(
                "GET",
                f"{API_PREFIX}/sandboxes",
                operation="list sandboxes",
                params={"metadata": urlencode(dict(metadata)), "page": page, "pageSize": PAGE_SIZE},
            )
            body = _object(response.json(), "list sandboxes")
            items = body.get("items")
            pagination = body.get("pagination")
            if not isinstance(items, list) or not isinstance(pagination, dict):
                raise RemoteUnavailable("list sandboxes: the answer lacks items or pagination")
            found.extend(_object(item, "list sandboxes") for item in items)
            if not pagination.get("hasNextPage"):
                return found
            total = pagination.get("totalPages")
            if (
                not items
                or pagination.get("page") != page
                or (isinstance(total, int) and page >= total)
            ):
                raise RemoteUnavailable(
                    f"list sandboxes: pagination does not advance at page {page}"
                )
        raise RemoteUnavailable(f"list sandboxes: more than {MAX_PAGES} pages")

    async def get(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox document; :class:`SandboxNotFound` if it does not exist."""
        response = await self.client.request(
            "GET",
            f"{API_PREFIX}/sandboxes/{sandbox_id}",
            operation="get sandbox",
            sandbox_id=sandbox_id,
        )
        return _object(response.json(), "get sandbox")

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /sandboxes`` once (never retried: the caller recovers by listing)."""
        response = await self.client.request(
            "POST", f"{API_PREFIX}/sandboxes", operation="create sandbox", json=dict(body)
        )
        created = _object(response.json(), "create sandbox")
        if not isinstance(created.get("id"), str) or not created["id"]:
            raise RemoteUnavailable("create sandbox: the answer has no sandbox id")
        return created

    async def resume(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/resume`` (a paused sandbox comes back)."""
        await self.client.request(
            "POST",
            f"{API_PREFIX}/sandboxes/{sandbox_id}/resume",
            operation="resume sandbox",
            sandbox_id=sandbox_id,
            idempotent=True,
        )

    async def delete(self, sandbox_id: str) -> bool:
        """Delete the sandbox; ``False`` if it was already gone."""
        response = await self.client.request(
            "DELETE",
            f"{API_PREFIX}/sandboxes/{sandbox_id}",
            operation="delete sandbox",
            expected=(404,),
        )
        return response.status_code != 404

    async def endpoint(self, sandbox_id: str, port: int, *, server_proxy: bool) -> Endpoint:
        """Resolve where ``port`` of the sandbox answers (directly or through the server)."""
        response = await self.client.request(
            "GET",
            f"{API_PREFIX}/sandboxes/{sandbox_id}/endpoints/{port}",
            operation="resolve sandbox endpoint",
            sandbox_id=sandbox_id,
            params={"use_server_proxy": "true" if server_proxy else "false"},
        )
        body = _object(response.json(), "resolve sandbox endpoint")
        raw = body.get("endpoint")
        if not isinstance(raw, str) or not raw.strip():
            raise RemoteUnavailable("resolve sandbox endpoint: the answer has no endpoint")
        url = raw.strip().rstrip("/")
        if "://" not in url:
            url = f"{self.protocol}://{url}"
        headers = body.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in headers.items()
        ):
            raise RemoteUnavailable("resolve sandbox endpoint: headers are not strings")
        return Endpoint(url, dict(headers))

    async def count(self) -> int:
        """How many sandboxes the credentials can see (one small page; a health probe)."""
        response = await self.client.request(
            "GET",
            f"{API_PREFIX}/sandboxes",
            operation="health check",
            params={"page": 1, "pageSize": 1},
        )
        body = _object(response.json(), "health check")
        pagination = body.get("pagination")
        total = pagination.get("totalItems") if isinstance(pagination, dict) else None
        if not isinstance(total, int):
            raise ProviderUnavailable("health check: the server's answer is not a sandbox listing")
        return total
