"""execd and the egress sidecar: the data plane of one sandbox.

Both are reached at an :class:`~mango_provider_opensandbox.lifecycle.Endpoint`
(directly, or through the lifecycle server's proxy) with the headers the
endpoint came with. One :class:`ApiClient` (no base URL) serves every sandbox
of a provider, so they share one connection pool.

A 404 from the data plane means "no such file" when execd says so
(``FILE_NOT_FOUND``); any other 404 (the proxy's "no such sandbox", a
gateway's) and every transport failure or 5xx is checked against the
lifecycle API (the provider view's
:meth:`~mango.provider.remote.ProviderView.lost`) before it is raised: a
vanished sandbox is :class:`SandboxNotFound`, never a missing file or an
outage.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, NoReturn

import attrs
import httpx

from mango.provider import (
    Entry,
    EntryKind,
    MangoError,
    PathExists,
    ProtocolError,
    ProviderUnavailable,
    file_not_found,
)
from mango.provider.filesystem import NativeEntry
from mango.provider.http import ApiClient, RetryPolicy, json_answer, transfer_deadline
from mango.provider.jsonstream import json_array_items
from mango.provider.multipart import FormField, multipart_body
from mango.provider.remote import ProviderView
from mango_provider_opensandbox.lifecycle import Endpoint
from mango_provider_opensandbox.wire import bounded_lines, sse_events

__all__ = ["LIST_DEPTH_ALL", "DataPlane", "Egress", "Execd", "native_entry"]

LIST_DEPTH_ALL = 4096
"""``/directories/list``'s depth for a recursive listing: deeper than any path goes."""

_KINDS = {
    "file": EntryKind.REGULAR,
    "directory": EntryKind.DIRECTORY,
    "symlink": EntryKind.SYMLINK,
}
_OCTAL_DIGITS = frozenset("01234567")


def _time(value: object) -> datetime | None:
    """Go's RFC 3339 time (nanoseconds cut to microseconds), or None."""
    if not isinstance(value, str):
        return None
    text = re.sub(r"(\.\d{1,6})\d*", r"\1", value, count=1).replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def native_entry(info: object, operation: str) -> NativeEntry:
    """execd's ``FileInfo`` (an ``lstat``) as a :class:`NativeEntry`.

    ``mode`` is the octal digits written as a decimal number (``640`` for
    ``0o640``); a value that is not such a number is left out.
    """
    if not isinstance(info, dict) or not isinstance(info.get("path"), str):
        raise ProtocolError(f"{operation}: an entry without a path")
    size, mode = info.get("size", 0), info.get("mode")
    if not isinstance(size, int) or isinstance(size, bool):
        raise ProtocolError(f"{operation}: size {size!r} is not a number")
    digits = str(mode) if isinstance(mode, int) and not isinstance(mode, bool) else ""
    return NativeEntry(
        path=info["path"],
        kind=_KINDS.get(str(info.get("type")), EntryKind.OTHER),
        size=size,
        mode=int(digits, 8) if digits and set(digits) <= _OCTAL_DIGITS else None,
        mtime=_time(info.get("modified_at")),
    )


def _mode(mode: int) -> int:
    """execd's mode: the octal digits written as a decimal number (0o644 -> 644)."""
    return int(f"{mode:o}")


@attrs.define(eq=False)
class DataPlane:
    """One sandbox port: requests to its endpoint, with the loss check on odd 404s."""

    client: ApiClient
    endpoint: Endpoint
    sandbox_id: str
    view: ProviderView = attrs.field(repr=False)
    """Asked whether the sandbox is gone after a failure (one lifecycle ``GET``)."""
    extra_headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this endpoint."""
        return self.endpoint.url + path

    @property
    def headers(self) -> dict[str, str]:
        """The endpoint's headers plus the provider's (the API key through the server proxy)."""
        return {**self.extra_headers, **self.endpoint.headers}

    async def request(
        self, method: str, path: str, *, operation: str, accept: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        """One request; a 404 not in ``accept`` is checked against the lifecycle API."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        try:
            response = await self.client.request(
                method,
                self.url(path),
                operation=operation,
                expected=(404, *accept),
                headers=headers,
                **kwargs,
            )
        except ProviderUnavailable as exc:
            await self.view.fail(self.sandbox_id, exc)
        if response.status_code == 404 and 404 not in accept:
            await self.gone(response, operation)
        return response

    async def gone(self, response: httpx.Response, operation: str) -> NoReturn:
        """Raise for a 404: :class:`SandboxNotFound` if the sandbox is gone, else the mapped 404."""
        try:
            self.client.check(response, operation=operation)
        except MangoError as exc:
            await self.view.fail(self.sandbox_id, exc)
        raise AssertionError("unreachable: a 404 was not mapped")  # pragma: no cover

    @asynccontextmanager
    async def stream(
        self, method: str, path: str, *, operation: str, accept: tuple[int, ...] = (), **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        """A streamed response; a 404 not in ``accept`` is checked against the lifecycle API."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        opened = self.client.stream(
            method,
            self.url(path),
            operation=operation,
            expected=(404, *accept),
            headers=headers,
            **kwargs,
        )
        try:
            response = await opened.__aenter__()
        except ProviderUnavailable as exc:
            await self.view.fail(self.sandbox_id, exc)
        try:
            if response.status_code == 404 and 404 not in accept:
                await response.aread()
                await self.gone(response, operation)
            yield response
        except BaseException as exc:
            if not await opened.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await opened.__aexit__(None, None, None)


def _file_missing(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code") == "FILE_NOT_FOUND"


@attrs.define(eq=False)
class Execd:
    """execd's command and file API for one sandbox."""

    plane: DataPlane

    async def ping(self) -> None:
        """``GET /ping``: execd answers."""
        await self.plane.request("GET", "/ping", operation="execd ping")

    async def wait_ready(self, seconds: float) -> None:
        """Poll ``GET /ping`` until execd answers, at most ``seconds`` (as the SDK does).

        A sandbox is ``Running`` when its container runs; execd inside it may
        not listen yet (a 502 from the proxy, a refused connection). Each probe
        is one attempt; the last failure is raised when the time is up.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        pause = 0.05
        once = RetryPolicy(attempts=1)
        while True:
            try:
                await self.plane.client.request(
                    "GET",
                    self.plane.url("/ping"),
                    operation="execd ping",
                    headers=self.plane.headers,
                    retry=once,
                )
            except ProviderUnavailable as exc:
                if loop.time() + pause > deadline:
                    raise ProviderUnavailable(
                        f"OpenSandbox sandbox {self.plane.sandbox_id} is running but its execd "
                        f"did not answer within {seconds:.0f}s: {exc}"
                    ) from exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            else:
                return

    async def info(self, path: str) -> NativeEntry | None:
        """``GET /files/info``: the entry at ``path`` (an ``lstat``), or None if missing."""
        response = await self.plane.request(
            "GET", "/files/info", operation="file info", params={"path": path}, accept=(404,)
        )
        if response.status_code == 404:
            if _file_missing(response):
                return None
            await self.plane.gone(response, "file info")
        body = json_answer(response, operation="file info", shape=dict)
        info = body.get(path)
        if not isinstance(info, dict):
            # execd keys the answer by the path asked; a missing key means missing.
            return None
        return native_entry({**info, "path": path}, "file info")

    async def stat(self, path: str) -> Entry | None:
        """``GET /files/info``: the entry at ``path`` (links not followed), or None if missing."""
        native = await self.info(path)
        return None if native is None else native.entry

    @asynccontextmanager
    async def list_directory(
        self, path: str, *, depth: int
    ) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        """``GET /directories/list``: the entries below ``path``, parsed as they arrive.

        execd answers the whole walk as one JSON array, with no bound of its
        own; it is read item by item, so the caller holds only what it keeps.
        """
        operation = "list directory"
        async with self.plane.stream(
            "GET",
            "/directories/list",
            operation=operation,
            params={"path": path, "depth": str(depth)},
            accept=(404,),
        ) as response:
            if response.status_code == 404:
                await response.aread()
                if _file_missing(response):
                    raise file_not_found(path)
                await self.plane.gone(response, operation)

            async def entries() -> AsyncIterator[NativeEntry]:
                items = json_array_items(response.aiter_bytes(), operation=operation)
                async for item in items:
                    yield native_entry(item, operation)

            yield entries()

    async def move(self, source: str, destination: str) -> None:
        """``POST /files/mv``: one rename (execd refuses an existing destination, seen through
        ``os.Stat``; a dangling link as the source is "not found"). Not retried."""
        response = await self.plane.request(
            "POST",
            "/files/mv",
            operation="move file",
            json=[{"src": source, "dest": destination}],
            idempotent=False,
            accept=(404, 500),
        )
        if response.status_code == 404 and _file_missing(response):
            raise file_not_found(source)
        if response.status_code == 500 and "destination path already exists" in response.text:
            # Created since the kit's check: execd's own refusal (a RUNTIME_ERROR).
            raise PathExists(f"cannot rename to {destination!r}: it exists")
        if response.status_code in (404, 500):
            await self.plane.gone(response, "move file")

    async def remove_tree(self, path: str) -> None:
        """``DELETE /directories``: execd's ``os.RemoveAll`` (a link itself; missing is fine)."""
        await self.plane.request(
            "DELETE", "/directories", operation="remove directory", params={"path": path}
        )

    async def make_dirs(self, paths: Mapping[str, int]) -> None:
        """``POST /directories`` (``mkdir -p`` and chmod for each path -> mode)."""
        if not paths:
            return
        await self.plane.request(
            "POST",
            "/directories",
            operation="make directories",
            json={path: {"mode": _mode(mode)} for path, mode in paths.items()},
            idempotent=True,
        )

    async def upload(self, path: str, data: bytes, *, mode: int) -> None:
        """``POST /files/upload``: metadata part, then the file part; creates or truncates."""
        metadata = json.dumps({"path": path, "mode": _mode(mode)})
        await self.plane.request(
            "POST",
            "/files/upload",
            operation="upload file",
            files=[
                ("metadata", ("metadata", metadata.encode(), "application/json")),
                ("file", (path.rsplit("/", 1)[-1] or "file", data, "application/octet-stream")),
            ],
            idempotent=True,
            deadline=transfer_deadline(len(data)),
        )

    async def upload_stream(self, path: str, chunks: AsyncIterator[bytes], *, mode: int) -> None:
        """:meth:`upload` with the file part sent as ``chunks`` yields it (chunked encoding).

        Never retried (the chunks cannot be replayed); no overall deadline:
        httpx's write and read timeouts bound every chunk and the answer.
        """
        metadata = json.dumps({"path": path, "mode": _mode(mode)}).encode()
        form = multipart_body(
            (FormField("metadata", metadata, "metadata", "application/json"),),
            file_field="file",
            filename=path.rsplit("/", 1)[-1] or "file",
            chunks=chunks,
        )
        await self.plane.request(
            "POST",
            "/files/upload",
            operation="upload file",
            content=form.chunks,
            headers={"Content-Type": form.content_type},
            idempotent=False,
            deadline=math.inf,
        )

    async def delete_file(self, path: str) -> None:
        """``DELETE /files`` (a missing file is fine)."""
        await self.plane.request(
            "DELETE", "/files", operation="delete file", params={"path": path}, accept=(404,)
        )

    @asynccontextmanager
    async def download(
        self, path: str, *, shown: str | None = None
    ) -> AsyncIterator[httpx.Response]:
        """``GET /files/download``, streamed; :class:`FileNotFoundError` if it vanished.

        ``shown`` is the path as the caller gave it, for the error (default: ``path``).
        """
        async with self.plane.stream(
            "GET",
            "/files/download",
            operation="download file",
            params={"path": path},
            accept=(404,),
        ) as response:
            if response.status_code == 404:
                await response.aread()
                if _file_missing(response):
                    raise file_not_found(shown or path)
                await self.plane.gone(response, "download file")
            yield response

    @asynccontextmanager
    async def command(
        self, body: Mapping[str, Any], *, timeout: float
    ) -> AsyncIterator[httpx.Response]:
        """``POST /command`` with an event stream back; never retried (it runs the command).

        The read timeout is off: a command may be silent for as long as it
        runs (execd pings every few seconds), and mango bounds it itself.
        """
        async with self.plane.stream(
            "POST",
            "/command",
            operation="run command",
            json=dict(body),
            headers={"Accept": "text/event-stream", "Cache-Control": "no-cache"},
            timeout=httpx.Timeout(timeout, read=None),
            idempotent=False,
        ) as response:
            yield response

    async def start_background(self, line: str, *, cwd: str, timeout: float) -> str:
        """``POST /command`` with ``background``: execd starts ``line`` detached and answers
        ``init`` (the command's id), then ``execution_complete``; the id is returned at once
        (the command does not hang on this request: execd runs it on its own context)."""
        body = {"command": line, "cwd": cwd, "background": True}
        async with self.command(body, timeout=timeout) as response:
            async for event in sse_events(bounded_lines(response.aiter_bytes())):
                if event.get("type") == "init" and isinstance(event.get("text"), str):
                    return str(event["text"])
                if event.get("type") == "error":
                    raise ProviderUnavailable(
                        f"execd could not start the background command: {str(event)[:200]}"
                    )
        raise ProviderUnavailable("run background command: execd sent no init event")

    async def command_logs(self, command_id: str, cursor: int, max_bytes: int) -> tuple[bytes, int]:
        """``GET /command/{id}/logs?cursor=``: at most ``max_bytes`` from byte ``cursor`` of the
        background command's combined output, and its end (``EXECD-COMMANDS-TAIL-CURSOR``).

        execd seeks the output file to the cursor (a byte offset, whatever the
        spec's "line" says) and answers the rest of it: the body is read only up
        to ``max_bytes`` and the response is closed there.
        """
        operation = "get background command logs"
        async with self.plane.stream(
            "GET",
            f"/command/{urllib.parse.quote(command_id, safe='')}/logs",
            operation=operation,
            params={"cursor": str(cursor)},
        ) as response:
            tail = response.headers.get("EXECD-COMMANDS-TAIL-CURSOR", "")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk[: max_bytes - len(data)]
                if len(data) >= max_bytes:
                    break
        end = int(tail) if tail.strip().isdigit() else cursor + len(data)
        return bytes(data), end

    async def interrupt(self, command_id: str) -> None:
        """``DELETE /command?id=``: stop a running command (best effort by the caller)."""
        await self.plane.request(
            "DELETE", "/command", operation="interrupt command", params={"id": command_id}
        )


@attrs.define(eq=False)
class Egress:
    """The egress sidecar's policy API for one sandbox."""

    plane: DataPlane

    async def policy(self) -> dict[str, Any] | None:
        """``GET /policy``: the enforced policy (``None`` if the sidecar reports none)."""
        response = await self.plane.request("GET", "/policy", operation="get egress policy")
        body = json_answer(response, operation="get egress policy", shape=dict)
        policy = body.get("policy")
        return policy if isinstance(policy, dict) else None

    async def remove(self, targets: list[str]) -> None:
        """``DELETE /policy`` with the targets whose rules go (unknown ones are ignored)."""
        await self.plane.request("DELETE", "/policy", operation="remove egress rules", json=targets)

    async def add(self, rules: list[dict[str, str]]) -> None:
        """``PATCH /policy``: merge rules (the incoming rule wins for its target)."""
        await self.plane.request(
            "PATCH", "/policy", operation="add egress rules", json=rules, idempotent=True
        )
