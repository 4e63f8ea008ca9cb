"""The OpenSandbox lifecycle API (``<domain>/v1``): sandboxes and their endpoints.

One :class:`LifecycleApi` per provider: list by metadata (every page),
create, get, delete, endpoint resolution. Errors come from the kit's map
(:mod:`mango.provider.http`): a 404 on a sandbox is :class:`SandboxNotFound`,
401/403 a :class:`ConfigurationError` that never repeats the key. Every
answer must be the JSON the API specifies (a sandbox record carries the id
asked for): anything else is a :class:`ProtocolError`, never a loss and never
"unmanaged".

A create that the server refuses for its configuration is classified by the
server's error code (``{"code", "message"}``, alibaba/OpenSandbox
``server/opensandbox_server/services/constants.py``), not by its status: a
500 ``DOCKER::SANDBOX_IMAGE_PULL_FAILED`` (the image cannot be pulled) or a
400 asking for ``egress.image`` (no egress sidecar configured for a
``networkPolicy``) is a :class:`ConfigurationError` with a hint, which no
retry fixes; other 5xx stay retryable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import attrs
import httpx

from mango.provider import ConfigurationError, ProtocolError
from mango.provider.http import ApiClient, json_answer
from mango_provider_opensandbox.layout import API_PREFIX

__all__ = [
    "CONFIGURATION_CODES",
    "GONE_STATES",
    "MAX_PAGES",
    "PAGE_SIZE",
    "Endpoint",
    "LifecycleApi",
    "state_of",
]

PAGE_SIZE = 100
MAX_PAGES = 1000
"""A bound on one listing (100 000 sandboxes); a server that pages on forever is an error."""
GONE_STATES = frozenset({"Stopping", "Terminated"})
"""States of a sandbox that is going or gone: its workspace is lost."""
IMAGE_PULL_FAILED = "DOCKER::SANDBOX_IMAGE_PULL_FAILED"
CONFIGURATION_CODES = frozenset(
    {
        IMAGE_PULL_FAILED,
        "DOCKER::INVALID_ENTRYPOINT",
        "DOCKER::INVALID_PORT",
        "SANDBOX::INVALID_PARAMETER",
        "SANDBOX::INVALID_METADATA_LABEL",
        "SANDBOX::API_NOT_SUPPORTED",
    }
)
"""Error codes of a create that the server's or the spec's configuration causes."""


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
        raise ProtocolError(f"{what}: the server answered {type(value).__name__}, not an object")
    return value


def _sandbox(value: object, what: str, sandbox_id: str | None = None) -> dict[str, Any]:
    """A sandbox record: an object with a string ``id`` (the one asked for, if any)."""
    record = _object(value, what)
    found = record.get("id")
    if not isinstance(found, str) or not found:
        raise ProtocolError(f"{what}: the server's answer is not a sandbox record")
    if sandbox_id is not None and found != sandbox_id:
        raise ProtocolError(f"{what}: asked for sandbox {sandbox_id!r}, the answer is {found!r}'s")
    return record


def _error_code(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    code, message = body.get("code"), body.get("message")
    return (code if isinstance(code, str) else ""), (message if isinstance(message, str) else "")


def _create_refusal(response: httpx.Response) -> ConfigurationError | None:
    """The configuration error a refused create means, or ``None`` (the kit's map decides)."""
    code, message = _error_code(response)
    shown = "".join(ch if ch.isprintable() else " " for ch in message)[:240]
    if code == IMAGE_PULL_FAILED:
        return ConfigurationError(
            f"create sandbox: the OpenSandbox server cannot pull the image: {shown}",
            hint="check OPEN_SANDBOX_IMAGE (or the spec's image) and that the server "
            "can reach its registry",
        )
    if "egress.image" in message:
        return ConfigurationError(
            f"create sandbox: {shown}",
            hint="network=none and limited need the server's egress sidecar: set egress.image "
            "in the OpenSandbox server's configuration (or use network=bridge)",
        )
    if code in CONFIGURATION_CODES:
        return ConfigurationError(
            f"create sandbox: the OpenSandbox server refused the sandbox ({code}): {shown}"
        )
    return None


@attrs.define(eq=False)
class LifecycleApi:
    """Calls of the lifecycle API over one :class:`ApiClient` (base ``<domain>``)."""

    client: ApiClient
    protocol: str = "http"
    """Scheme put in front of an endpoint the server returns without one."""

    async def list(self, metadata: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every sandbox whose metadata has all of ``metadata``, over every page.

        Raises :class:`ProtocolError` on a pagination that does not advance.
        """
        found: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            response = await self.client.request(
                "GET",
                f"{API_PREFIX}/sandboxes",
                operation="list sandboxes",
                params={"metadata": urlencode(dict(metadata)), "page": page, "pageSize": PAGE_SIZE},
            )
            body = json_answer(response, operation="list sandboxes", shape=dict)
            items = body.get("items")
            pagination = body.get("pagination")
            if not isinstance(items, list) or not isinstance(pagination, dict):
                raise ProtocolError("list sandboxes: the answer lacks items or pagination")
            found.extend(_sandbox(item, "list sandboxes") for item in items)
            if not pagination.get("hasNextPage"):
                return found
            total = pagination.get("totalPages")
            if (
                not items
                or pagination.get("page") != page
                or (isinstance(total, int) and page >= total)
            ):
                raise ProtocolError(f"list sandboxes: pagination does not advance at page {page}")
        raise ProtocolError(f"list sandboxes: more than {MAX_PAGES} pages")

    async def get(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox document; :class:`SandboxNotFound` if it does not exist (a confirmed
        not-found: the server's own lookup), :class:`ProtocolError` for any other answer."""
        response = await self.client.request(
            "GET",
            f"{API_PREFIX}/sandboxes/{sandbox_id}",
            operation="get sandbox",
            sandbox_id=sandbox_id,
        )
        return _sandbox(json_answer(response, operation="get sandbox"), "get sandbox", sandbox_id)

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /sandboxes`` once (never retried: the caller recovers by listing).

        A refusal the server's error code blames on configuration is a
        :class:`ConfigurationError` with a hint (see the module docstring).
        """
        response = await self.client.request(
            "POST",
            f"{API_PREFIX}/sandboxes",
            operation="create sandbox",
            json=dict(body),
            expected=(400, 500),
        )
        if response.status_code in (400, 500):
            refusal = _create_refusal(response)
            if refusal is not None:
                raise refusal
            self.client.check(response, operation="create sandbox")
        return _sandbox(json_answer(response, operation="create sandbox"), "create sandbox")

    async def pause(self, sandbox_id: str) -> bool:
        """``POST /sandboxes/{id}/pause`` (202: Pausing, then Paused); ``False`` on a refusal
        for its state.

        The server refuses a sandbox that is not Running with a 409 (and the
        Docker runtime a second pause with a 500 from the Engine): the caller
        reads the state again to tell "already paused" from a real failure.
        """
        return await self._transition(sandbox_id, "pause")

    async def resume(self, sandbox_id: str) -> bool:
        """``POST /sandboxes/{id}/resume`` (202: Resuming, then Running); ``False`` on a
        refusal for its state (409: it is not Paused)."""
        return await self._transition(sandbox_id, "resume")

    async def _transition(self, sandbox_id: str, verb: str) -> bool:
        response = await self.client.request(
            "POST",
            f"{API_PREFIX}/sandboxes/{sandbox_id}/{verb}",
            operation=f"{verb} sandbox",
            sandbox_id=sandbox_id,
            expected=(409, 500),
        )
        if response.status_code == 500:
            code, _ = _error_code(response)
            if not code.endswith(("_PAUSE_FAILED", "_RESUME_FAILED")):
                self.client.check(response, operation=f"{verb} sandbox")
            return False
        return response.status_code != 409

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
        body = json_answer(response, operation="resolve sandbox endpoint", shape=dict)
        raw = body.get("endpoint")
        if not isinstance(raw, str) or not raw.strip():
            raise ProtocolError("resolve sandbox endpoint: the answer has no endpoint")
        url = raw.strip().rstrip("/")
        if "://" not in url:
            url = f"{self.protocol}://{url}"
        headers = body.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in headers.items()
        ):
            raise ProtocolError("resolve sandbox endpoint: headers are not strings")
        return Endpoint(url, dict(headers))

    async def count(self) -> int:
        """How many sandboxes the credentials can see (one small page; a health probe)."""
        response = await self.client.request(
            "GET",
            f"{API_PREFIX}/sandboxes",
            operation="health check",
            params={"page": 1, "pageSize": 1},
        )
        body = json_answer(response, operation="health check", shape=dict)
        pagination = body.get("pagination")
        total = pagination.get("totalItems") if isinstance(pagination, dict) else None
        if not isinstance(total, int):
            raise ProtocolError("health check: the server's answer is not a sandbox listing")
        return total
