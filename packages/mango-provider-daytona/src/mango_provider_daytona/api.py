"""The two HTTP planes of Daytona: the control-plane API and a sandbox's toolbox.

Both go through the kit's :class:`~mango.provider.http.ApiClient` (one error
map, retries of idempotent calls, credentials blanked from messages). The
wire facts are the Daytona API's and daemon's (``GET/POST/DELETE /sandbox``,
``POST /sandbox/{id}/start``, ``{toolboxProxyUrl}/{id}/process/execute``,
``/files/bulk-upload``, ``/files/bulk-download``, ``/files/folder``,
``/user-home-dir``); the SDK is never imported.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx

from mango.provider import (
    ConfigurationError,
    ProtocolError,
    ProviderUnavailable,
    ResourceConflict,
)
from mango.provider.http import (
    DEFAULT_RETRY_POLICY,
    MAX_ANSWER_BYTES,
    ApiClient,
    RetryPolicy,
    json_answer,
    transfer_deadline,
)
from mango.provider.jsonstream import json_array_items
from mango.provider.multipart import FormField, multipart_body

__all__ = [
    "API_TIMEOUT",
    "USER_AGENT",
    "DaytonaApi",
    "Toolbox",
    "sandbox_record",
    "sandbox_state",
]

USER_AGENT = "mango-provider-daytona"
API_TIMEOUT = 60.0
"""Seconds an API call may take (the SDKs' default)."""
_PAGE = 100
_MAX_PAGES = 1000


def sandbox_state(sandbox: Mapping[str, Any]) -> str:
    """The ``state`` of a sandbox document, lower case (``"unknown"`` if absent)."""
    return str(sandbox.get("state") or "unknown").lower()


def _document(response: httpx.Response, what: str) -> dict[str, Any]:
    body: dict[str, Any] = json_answer(response, operation=what, shape=dict)
    return body


def sandbox_record(document: dict[str, Any], what: str) -> dict[str, Any]:
    """``document`` if it is a sandbox record (a string ``id``, a ``labels`` object, a string
    ``state``); else a :class:`ProtocolError`, never "unmanaged" and never "gone"."""
    if (
        not isinstance(document.get("id"), str)
        or not document["id"]
        or not isinstance(document.get("labels", {}), dict)
        or not isinstance(document.get("state", ""), str)
    ):
        raise ProtocolError(f"{what}: the Daytona API's answer is not a sandbox record")
    return document


@attrs.define(eq=False)
class DaytonaApi:
    """The control plane: sandboxes by id or name, labels, start, delete, list."""

    client: ApiClient

    @classmethod
    def open(
        cls,
        api_url: str,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> DaytonaApi:
        """A client for ``api_url`` (``…/api``) sending ``api_key`` as a bearer token."""
        return cls(
            ApiClient(
                api_url.rstrip("/"),
                auth_headers={"Authorization": f"Bearer {api_key}"},
                headers={"User-Agent": USER_AGENT, "X-Daytona-Source": USER_AGENT},
                timeout=API_TIMEOUT,
                transport=transport,
                retry=retry,
            )
        )

    async def get(self, id_or_name: str) -> dict[str, Any] | None:
        """``GET /sandbox/{idOrName}``; ``None`` if Daytona does not know it."""
        response = await self.client.request(
            "GET", f"/sandbox/{_segment(id_or_name)}", operation="get sandbox", expected=(404,)
        )
        if response.status_code == 404:
            return None
        return sandbox_record(_document(response, "get sandbox"), "get sandbox")

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """``POST /sandbox``; ``None`` if the name is taken (HTTP 409), never retried."""
        try:
            response = await self.client.request(
                "POST", "/sandbox", operation="create sandbox", json=dict(body)
            )
        except ResourceConflict:
            return None
        return sandbox_record(_document(response, "create sandbox"), "create sandbox")

    async def start(self, sandbox_id: str) -> dict[str, Any]:
        """``POST /sandbox/{id}/start`` (starting a started sandbox is harmless, so retried)."""
        response = await self.client.request(
            "POST",
            f"/sandbox/{_segment(sandbox_id)}/start",
            operation="start sandbox",
            sandbox_id=sandbox_id,
            idempotent=True,
        )
        return sandbox_record(_document(response, "start sandbox"), "start sandbox")

    async def delete(self, sandbox_id: str) -> bool:
        """``DELETE /sandbox/{id}``; ``False`` if it was already gone."""
        path = f"/sandbox/{_segment(sandbox_id)}"
        response = await self.client.request(
            "DELETE", path, operation="delete sandbox", expected=(404,)
        )
        return response.status_code != 404

    async def touch(self, sandbox_id: str) -> None:
        """``POST /sandbox/{id}/last-activity``: restart the idle (auto-pause) clock.

        Its 404 is not a loss: an older API has no such route, so the answer
        cannot tell a missing route from a missing sandbox (the caller's
        ``GET`` has just seen the sandbox).
        """
        await self.client.request(
            "POST",
            f"/sandbox/{_segment(sandbox_id)}/last-activity",
            operation="update sandbox activity",
            idempotent=True,
        )

    async def list(
        self, labels: Mapping[str, str], *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``GET /sandbox?labels=<json>``, every page (``nextCursor``), or the first ``limit``."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params: dict[str, str | int] = {
                "labels": json.dumps(dict(labels), sort_keys=True),
                "limit": min(limit or _PAGE, _PAGE),
            }
            if cursor:
                params["cursor"] = cursor
            response = await self.client.request(
                "GET", "/sandbox", operation="list sandboxes", params=params
            )
            body = json_answer(response, operation="list sandboxes")
            page = body.get("items") if isinstance(body, dict) else body
            if not isinstance(page, list):
                raise ProtocolError("list sandboxes: the Daytona API answered no item list")
            items.extend(item for item in page if isinstance(item, dict))
            cursor = body.get("nextCursor") if isinstance(body, dict) else None
            if not cursor or (limit is not None and len(items) >= limit):
                return items
        raise ProtocolError("list sandboxes: the Daytona API kept returning more pages")

    async def preview_url(self, sandbox_id: str, port: int) -> tuple[str, str]:
        """``GET /sandbox/{id}/ports/{port}/preview-url``: the preview link and its token.

        :class:`SandboxNotFound` for a sandbox that is gone;
        :class:`ProtocolError` unless the answer has a string ``url`` and ``token``.
        """
        response = await self.client.request(
            "GET",
            f"/sandbox/{_segment(sandbox_id)}/ports/{port}/preview-url",
            operation="get preview url",
            sandbox_id=sandbox_id,
        )
        body = _document(response, "get preview url")
        url, token = body.get("url"), body.get("token")
        if not isinstance(url, str) or not url or not isinstance(token, str):
            raise ProtocolError("get preview url: the Daytona API's answer has no url and token")
        return url, token

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.client.aclose()


def _segment(value: str) -> str:
    # The provider validates ids and names first; quoting keeps any value one path segment.
    return urllib.parse.quote(value, safe="")


def toolbox_url(sandbox: Mapping[str, Any]) -> str:
    """``{toolboxProxyUrl}/{id}``: the toolbox base of a sandbox document."""
    base = sandbox.get("toolboxProxyUrl")
    sandbox_id = sandbox.get("id")
    if not isinstance(base, str) or not base or not isinstance(sandbox_id, str):
        raise ProtocolError("the Daytona API returned a sandbox without a toolbox address")
    return f"{base.rstrip('/')}/{sandbox_id}"


_LONG = httpx.Timeout(connect=API_TIMEOUT, read=None, write=API_TIMEOUT, pool=API_TIMEOUT)


@attrs.define(eq=False)
class Toolbox:
    """The data plane of one sandbox: ``{toolboxProxyUrl}/{sandboxId}/...``.

    ``client`` is shared by every sandbox behind the same proxy; ``prefix`` is
    the path of this sandbox below it.
    """

    client: ApiClient
    prefix: str
    sandbox_id: str

    async def execute(
        self, line: str, *, timeout: float | None, max_bytes: int = MAX_ANSWER_BYTES
    ) -> tuple[int, str]:
        """``POST /process/execute``: run ``line``; return the exit code and the merged text.

        ``timeout`` (seconds) is sent to the daemon, which kills the command's
        process group when it expires (HTTP 408); the request's own deadline
        is that plus a minute (none without a timeout: the command may run as
        long as it likes). ``max_bytes`` bounds the answer (the wrapper's
        framed output). Never retried: it runs a command.
        """
        body: dict[str, Any] = {"command": line}
        if timeout is not None:
            body["timeout"] = max(1, math.ceil(timeout))
        response = await self.client.request(
            "POST",
            f"{self.prefix}/process/execute",
            operation="execute command",
            json=body,
            timeout=_LONG,
            max_bytes=max_bytes,
            deadline=math.inf if timeout is None else timeout + API_TIMEOUT,
        )
        document = _document(response, "execute command")
        code = document.get("exitCode", document.get("code", 0))
        result = document.get("result", "")
        if not isinstance(code, int) or not isinstance(result, str):
            raise ProtocolError("execute command: the toolbox answered a malformed result")
        return code, result

    async def create_session(self, session_id: str) -> None:
        """``POST /process/session``: a session (one long-lived shell); 409 if it exists."""
        await self.client.request(
            "POST",
            f"{self.prefix}/process/session",
            operation="create session",
            json={"sessionId": session_id},
            idempotent=False,
        )

    async def execute_async(self, session_id: str, line: str) -> str:
        """``POST /process/session/{id}/exec`` with ``runAsync``: the command's id (202).

        The session's shell runs ``line``; the call returns once it was handed
        over. Never retried: it runs a command.
        """
        response = await self.client.request(
            "POST",
            f"{self.prefix}/process/session/{urllib.parse.quote(session_id, safe='')}/exec",
            operation="execute session command",
            json={"command": line, "runAsync": True},
            idempotent=False,
        )
        command_id = _document(response, "execute session command").get("cmdId")
        if not isinstance(command_id, str) or not command_id:
            raise ProtocolError("execute session command: the toolbox answered no cmdId")
        return command_id

    async def delete_session(self, session_id: str) -> None:
        """``DELETE /process/session/{id}`` (its shell ends); gone already is success."""
        await self.client.request(
            "DELETE",
            f"{self.prefix}/process/session/{urllib.parse.quote(session_id, safe='')}",
            operation="delete session",
            expected=(404,),
            idempotent=True,
        )

    async def home_dir(self) -> str:
        """``GET /user-home-dir``: the sandbox user's home (mango's workspace root)."""
        response = await self.client.request(
            "GET", f"{self.prefix}/user-home-dir", operation="get home directory"
        )
        directory = _document(response, "get home directory").get("dir")
        if not isinstance(directory, str) or not directory.startswith("/"):
            raise ProtocolError("the toolbox reported no absolute home directory")
        return directory

    async def make_dir(self, path: str, mode: str = "0755") -> None:
        """``POST /files/folder?path=&mode=`` (``mkdir -p``; repeating it is harmless)."""
        await self.client.request(
            "POST",
            f"{self.prefix}/files/folder",
            operation="create directory",
            params={"path": path, "mode": mode},
            idempotent=True,
        )

    async def upload(self, path: str, data: bytes) -> None:
        """``POST /files/bulk-upload`` (multipart ``files[0].path``/``files[0].file``)."""
        response = await self.client.request(
            "POST",
            f"{self.prefix}/files/bulk-upload",
            operation="upload file",
            data={"files[0].path": path},
            files={"files[0].file": (path, data, "application/octet-stream")},
            idempotent=True,
            timeout=_LONG,
            deadline=transfer_deadline(len(data)),
        )
        _check_upload(response)

    async def upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        """:meth:`upload` with the file part sent as ``chunks`` yields it (chunked encoding).

        Never retried (the chunks cannot be replayed); no overall deadline:
        httpx's write timeout bounds every chunk.
        """
        form = multipart_body(
            (FormField("files[0].path", path.encode()),),
            file_field="files[0].file",
            filename=path,
            chunks=chunks,
        )
        response = await self.client.request(
            "POST",
            f"{self.prefix}/files/bulk-upload",
            operation="upload file",
            content=form.chunks,
            headers={"Content-Type": form.content_type},
            idempotent=False,
            timeout=_LONG,
            deadline=math.inf,
        )
        _check_upload(response)

    @asynccontextmanager
    async def search(self, path: str) -> AsyncIterator[AsyncIterator[str]]:
        """``GET /files/search?path=&pattern=*``: every path of the tree at ``path``.

        The daemon walks with ``filepath.Walk`` (an ``lstat`` per entry: links
        are listed and never followed, dangling ones too), pre-order, each
        directory in name order, ``path`` itself first; the whole walk is one
        ``{"files": [...]}`` document, read here as it arrives.
        """
        operation = "search files"
        async with self.client.stream(
            "GET",
            f"{self.prefix}/files/search",
            operation=operation,
            params={"path": path, "pattern": "*"},
            idempotent=True,
            timeout=_LONG,
        ) as response:

            async def paths() -> AsyncIterator[str]:
                items = json_array_items(response.aiter_bytes(), operation=operation, key="files")
                async for item in items:
                    if not isinstance(item, str):
                        raise ProtocolError(f"{operation}: a path that is not a string")
                    yield item

            yield paths()

    async def move(self, source: str, destination: str) -> bool:
        """``POST /files/move``; ``False`` if the source is missing (the daemon's 404).

        The daemon's ``os.Stat`` follows links: a dangling link as the source
        is "missing", and a destination is refused (409) only if it resolves.
        Not retried: a repeat after a lost answer would find the source gone.
        """
        response = await self.client.request(
            "POST",
            f"{self.prefix}/files/move",
            operation="move file",
            params={"source": source, "destination": destination},
            idempotent=False,
            expected=(404,),
        )
        return response.status_code != 404

    async def delete(self, path: str, *, recursive: bool) -> bool:
        """``DELETE /files?path=&recursive=``; ``False`` if the daemon's ``os.Stat`` finds nothing
        (a missing path, or a dangling link: the daemon cannot delete one)."""
        response = await self.client.request(
            "DELETE",
            f"{self.prefix}/files",
            operation="delete file",
            params={"path": path, "recursive": "true" if recursive else "false"},
            expected=(404,),
        )
        return response.status_code != 404

    @asynccontextmanager
    async def download(self, path: str) -> AsyncIterator[httpx.Response]:
        """``POST /files/bulk-download`` for one path: the open multipart response."""
        async with self.client.stream(
            "POST",
            f"{self.prefix}/files/bulk-download",
            operation="download file",
            json={"paths": [path]},
            headers={"Accept": "multipart/form-data"},
            idempotent=True,
            timeout=_LONG,
        ) as response:
            yield response


def check_api_url(url: str, setting: str) -> str:
    """``url`` without a trailing slash if it is an absolute http(s) URL; else a
    :class:`ConfigurationError` naming ``setting`` (never echoing the value's query)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ConfigurationError(f"{setting} is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(
            f"{setting} must be an http(s) URL such as https://app.daytona.io/api"
        )
    return url.rstrip("/")


def _check_upload(response: httpx.Response) -> None:
    """A bulk upload's answer: the per-file errors it lists are a failure."""
    try:
        errors = response.json().get("errors")
    except (ValueError, AttributeError):
        errors = None
    if errors:
        raise ProviderUnavailable(f"upload file: the toolbox reported {str(errors)[:200]}")
