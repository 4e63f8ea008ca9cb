"""envd, the agent inside every E2B (and Cube) sandbox: processes and files over HTTP.

* processes: Connect RPCs ``process.Process/Start`` (a server stream of
  ``start``/``data``/``end``/``keepalive`` events), ``SendInput``,
  ``CloseStdin``, ``SendSignal`` and ``List``;
* files: ``filesystem.Filesystem/Stat``, ``MakeDir``, ``Move``, ``Remove``
  (Connect unary, JSON) and ``ListDir`` (unary too, its answer read as it
  arrives), ``GET /files?path=`` (raw bytes, streamed) and ``POST /files?path=``
  (``application/octet-stream``).

envd's ``EntryInfo`` (e2b-dev/infra ``packages/shared/pkg/filesystem``) is an
``lstat`` whose ``type`` is the *target's* for a link (``FILE_TYPE_FILE`` for
a link to a file, ``FILE_TYPE_UNSPECIFIED`` for a dangling one): a link is
known by its ``symlinkTarget``, which envd sets for links only (or by
``isSymlink``, which the SDK reads from newer envd; ``FILE_TYPE_SYMLINK``
before either).

Every request carries the sandbox's ``X-Access-Token`` and the envd user
(``Authorization: Basic root:``); with one shared sandbox URL (``E2B_SANDBOX_URL``)
also ``E2b-Sandbox-Id``/``E2b-Sandbox-Port``, with which the proxy routes.
envd never kills a command whose stream the client left: the sandbox does
that explicitly (:meth:`Envd.signal`, or a kill line through :meth:`Envd.start`).
"""

from __future__ import annotations

import base64
import contextlib
import math
import re
import signal as signals
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

import attrs
import httpx

from mango.provider import Entry, EntryKind, ResourceConflict, file_not_found
from mango.provider.filesystem import NativeEntry
from mango.provider.http import (
    ApiClient,
    ProtocolError,
    RemoteUnavailable,
    json_answer,
    map_httpx_exceptions,
    transfer_deadline,
)
from mango.provider.jsonstream import json_array_items
from mango.provider.multipart import multipart_body
from mango_provider_e2b.connect import (
    CONNECT_CONTENT_TYPE,
    Envelope,
    decode_envelopes,
    encode_envelope,
)

__all__ = [
    "CLOSE_STDIN_SINCE",
    "ENVD_PORT",
    "LSTAT_SINCE",
    "OCTET_STREAM_SINCE",
    "ROOT_USER_AUTH",
    "TRAFFIC_TOKEN_HEADER",
    "Envd",
    "EnvdAddress",
    "at_least",
    "exit_code_of",
]

ENVD_PORT = 49983
"""envd's port inside every sandbox (the ``49983-`` of its host name)."""
TRAFFIC_TOKEN_HEADER = "E2B-Traffic-Access-Token"  # noqa: S105 - a header name, not a secret
"""The header of a sandbox's traffic access token (a sandbox created with restricted public
traffic wants it on every request to its ports)."""
ROOT_USER_AUTH = "Basic " + base64.b64encode(b"root:").decode()
"""envd runs processes and file operations as the user named here (``root``)."""
_UNARY_HEADERS = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
_STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)
"""A command may print nothing for minutes: no read timeout on its stream."""
_FILE_TIMEOUT = httpx.Timeout(30.0, read=120.0, write=120.0)
LSTAT_SINCE = (0, 2, 6)
"""The envd version whose ``Stat`` and ``ListDir`` entries are an ``lstat``
(e2b-dev/infra#924); older ones follow a link, so the file API is refused there."""
CLOSE_STDIN_SINCE = (0, 5, 2)
"""The envd version that has ``CloseStdin`` (the SDK's ``ENVD_ENVD_CLOSE``)."""
OCTET_STREAM_SINCE = (0, 5, 7)
"""The envd version whose ``POST /files`` takes a raw ``application/octet-stream`` body
(the SDK's ``ENVD_OCTET_STREAM_UPLOAD``); older ones read ``multipart/form-data`` only
and answer anything else with HTTP 500 ("error parsing multipart form")."""
_STATUS = re.compile(r"exit status (-?\d+)")
_SIGNAL = re.compile(r"signal: (.+)")
# Go's names for signals (syscall.Signal.String) as envd's status reports them.
_SIGNAL_NAMES = {
    "hangup": signals.SIGHUP,
    "interrupt": signals.SIGINT,
    "quit": signals.SIGQUIT,
    "aborted": signals.SIGABRT,
    "killed": signals.SIGKILL,
    "segmentation fault": signals.SIGSEGV,
    "broken pipe": signals.SIGPIPE,
    "alarm clock": signals.SIGALRM,
    "terminated": signals.SIGTERM,
    "user defined signal 1": signals.SIGUSR1,
    "user defined signal 2": signals.SIGUSR2,
}


def _version(text: str | None) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in (text or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def at_least(version: str | None, since: tuple[int, ...]) -> bool:
    """Whether the envd ``version`` (``"0.5.8"``; ``None``: unknown, the oldest) has ``since``."""
    return _version(version) >= since


@attrs.frozen
class EnvdAddress:
    """Where one sandbox's envd answers and the headers every request carries."""

    url: str
    headers: Mapping[str, str] = attrs.field(repr=False)

    @classmethod
    def build(
        cls,
        sandbox_id: str,
        *,
        domain: str,
        scheme: str,
        access_token: str | None,
        traffic_token: str | None = None,
        shared_url: str | None = None,
        api_key_header: str | None = None,
    ) -> EnvdAddress:
        """``<scheme>://49983-<id>.<domain>``, or ``shared_url`` routed by header."""
        headers = {"Authorization": ROOT_USER_AUTH}
        if access_token:
            headers["X-Access-Token"] = access_token
        if traffic_token:
            headers[TRAFFIC_TOKEN_HEADER] = traffic_token
        if api_key_header:
            headers["X-API-Key"] = api_key_header
        if shared_url:
            headers["E2b-Sandbox-Id"] = sandbox_id
            headers["E2b-Sandbox-Port"] = str(ENVD_PORT)
            return cls(shared_url.rstrip("/"), headers)
        return cls(f"{scheme}://{ENVD_PORT}-{sandbox_id}.{domain}", headers)


def exit_code_of(end: Mapping[str, Any]) -> int:
    """The exit code of an ``end`` event, shell style (128 + N for a signal)."""
    code = end.get("exitCode", end.get("exit_code"))
    status = end.get("status")
    status = status if isinstance(status, str) else ""
    if isinstance(code, int) and not isinstance(code, bool) and code >= 0:
        return code
    match = _STATUS.fullmatch(status)
    if match:
        return int(match.group(1))
    match = _SIGNAL.fullmatch(status)
    if match:
        name = match.group(1).strip().lower()
        number: int | None = _SIGNAL_NAMES.get(name)
        if number is None and name.startswith("signal "):
            tail = name.removeprefix("signal ")
            number = int(tail) if tail.isdigit() else None
        return 128 + int(number) if number is not None else -1
    if code is None and end.get("exited") is True:
        return 0
    return -1


_TYPES = {
    "FILE_TYPE_FILE": EntryKind.REGULAR,
    "FILE_TYPE_DIRECTORY": EntryKind.DIRECTORY,
    "FILE_TYPE_SYMLINK": EntryKind.SYMLINK,
}
LIST_DEPTH_ALL = 4096
"""``ListDir``'s depth for a recursive listing: deeper than any path can go (PATH_MAX)."""
_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def _timestamp(value: object) -> datetime | None:
    """A proto3 JSON ``Timestamp`` (RFC 3339, up to nanoseconds), or ``None``."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(_FRACTION.sub(r"\1", value, count=1).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def native_entry(info: object, operation: str) -> NativeEntry:
    """envd's ``EntryInfo`` as a :class:`NativeEntry` (a link known by its ``symlinkTarget``)."""
    if not isinstance(info, dict) or not isinstance(info.get("path"), str):
        raise ProtocolError(f"{operation}: an entry without a path")
    link = info.get("isSymlink", info.get("is_symlink")) is True
    if link or "symlinkTarget" in info or "symlink_target" in info:
        kind = EntryKind.SYMLINK
    else:
        kind = _TYPES.get(str(info.get("type")), EntryKind.OTHER)
    size, mode = info.get("size", 0), info.get("mode")
    # int64 travels as a JSON string in proto3 JSON; accept a number too.
    try:
        size = int(size)
    except (TypeError, ValueError):
        raise ProtocolError(f"{operation}: size {size!r} is not a number") from None
    return NativeEntry(
        path=info["path"],
        kind=kind,
        size=size,
        # A link's mode is its target's: not the link's own, so not reported.
        mode=mode if isinstance(mode, int) and kind is not EntryKind.SYMLINK else None,
        mtime=_timestamp(info.get("modifiedTime", info.get("modified_time"))),
    )


def _entry(value: object) -> Entry:
    info = value.get("entry") if isinstance(value, dict) else None
    if not isinstance(info, dict):
        raise ProtocolError("envd stat: the answer has no entry")
    info.setdefault("path", "")
    return native_entry(info, "envd stat").entry


async def _no_envelopes() -> AsyncIterator[Envelope]:
    # A plain 404 (an envd without the route, or a proxy that lost the sandbox).
    return
    yield  # pragma: no cover - makes this an async generator


async def _mapped(
    envelopes: AsyncIterator[Envelope], operation: str, secrets: tuple[str, ...]
) -> AsyncIterator[Envelope]:
    # Mapped here, not only when the stream's block exits, so that the reader
    # can tell a cut stream from its own failure (or its cancellation).
    with map_httpx_exceptions(operation, secrets=secrets):
        async for envelope in envelopes:
            yield envelope


@attrs.define(eq=False)
class Envd:
    """One sandbox's envd, through the provider's data-plane pool."""

    api: ApiClient
    address: EnvdAddress
    provider: str
    version: str | None = None
    """The envd version to go by (the calls that changed are chosen by it)."""

    def _url(self, route: str) -> str:
        return self.address.url + route

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self.address.headers, **(extra or {})}

    async def _unary(
        self,
        service: str,
        payload: Mapping[str, Any],
        *,
        idempotent: bool,
        expected: tuple[int, ...] = (404,),
    ) -> httpx.Response:
        return await self.api.request(
            "POST",
            self._url(f"/{service}"),
            operation=f"{self.provider}: envd {service.rsplit('/', 1)[-1]}",
            idempotent=idempotent,
            expected=expected,
            json=dict(payload),
            headers=self._headers(_UNARY_HEADERS),
        )

    async def _stat_answer(self, path: str) -> dict[str, Any] | None:
        response = await self._unary(
            "filesystem.Filesystem/Stat", {"path": path}, idempotent=True, expected=(404, 500)
        )
        if response.status_code == 500:
            # A path below a file: Go's os.IsNotExist is false for ENOTDIR, so envd answers
            # "internal" (not a retryable outage: nothing is there). The path policy looks at
            # such an answer only after the file above it, which it refuses.
            if "not a directory" in response.text:
                return None
            self.api.check(response, operation=f"{self.provider}: envd Stat")
        if response.status_code == 404:
            if "not_found" in response.text or "not found" in response.text:
                return None
            raise RemoteUnavailable(f"{self.provider}: envd Stat: HTTP 404 without not_found")
        answer: dict[str, Any] = json_answer(
            response, operation=f"{self.provider}: envd Stat", shape=dict
        )
        return answer

    async def stat(self, path: str) -> Entry | None:
        """The entry at ``path`` without following a final symlink; ``None`` if missing."""
        answer = await self._stat_answer(path)
        return None if answer is None else _entry(answer)

    async def info(self, path: str) -> NativeEntry | None:
        """``Stat`` with everything it tells (kind, size, mode, mtime); ``None`` if missing."""
        answer = await self._stat_answer(path)
        if answer is None:
            return None
        entry = answer.get("entry")
        if isinstance(entry, dict):
            entry = {**entry, "path": path}  # envd's path is the expanded one: the same
        return native_entry(entry, f"{self.provider}: envd Stat")

    @contextlib.asynccontextmanager
    async def list_dir(self, path: str, *, depth: int) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        """``ListDir``: the entries below ``path`` to ``depth`` levels, parsed as they arrive.

        envd answers the whole walk as one document (no bound of its own); it
        is read entry by entry, so the caller holds only what it keeps.
        """
        operation = f"{self.provider}: envd ListDir"
        async with self.api.stream(
            "POST",
            self._url("/filesystem.Filesystem/ListDir"),
            operation=operation,
            idempotent=True,
            expected=(404,),
            json={"path": path, "depth": depth},
            headers=self._headers(_UNARY_HEADERS),
            timeout=_FILE_TIMEOUT,
        ) as response:
            if response.status_code == 404:
                await response.aread()
                if "not_found" in response.text or "not found" in response.text:
                    raise file_not_found(path)
                raise RemoteUnavailable(f"{operation}: HTTP 404 without not_found")

            secrets = (*self.api.secrets, *self.address.headers.values())

            async def entries() -> AsyncIterator[NativeEntry]:
                items = json_array_items(response.aiter_bytes(), operation=operation, key="entries")
                with map_httpx_exceptions(operation, secrets=secrets):
                    async for item in items:
                        yield native_entry(item, operation)

            yield entries()

    async def move(self, source: str, destination: str) -> None:
        """``Move`` (envd's ``os.Rename``: it overwrites; the caller checked). Not retried."""
        response = await self._unary(
            "filesystem.Filesystem/Move",
            {"source": source, "destination": destination},
            idempotent=False,
        )
        if response.status_code == 404:
            raise file_not_found(source)

    async def remove(self, path: str) -> None:
        """``Remove`` (envd's ``os.RemoveAll``: always recursive; a missing path is success)."""
        response = await self._unary(
            "filesystem.Filesystem/Remove", {"path": path}, idempotent=True
        )
        if response.status_code == 404:
            raise RemoteUnavailable(f"{self.provider}: envd Remove: HTTP 404")

    async def make_dir(self, path: str) -> None:
        """Create ``path`` and its parents (an existing directory is fine)."""
        try:
            response = await self._unary(
                "filesystem.Filesystem/MakeDir", {"path": path}, idempotent=True
            )
        except ResourceConflict:
            # already_exists: someone made the directory first, which is what we wanted.
            return
        if response.status_code == 404:
            raise RemoteUnavailable(f"{self.provider}: envd MakeDir: HTTP 404")

    @contextlib.asynccontextmanager
    async def download(self, path: str) -> AsyncIterator[httpx.Response]:
        """``GET /files?path=``: the open streamed response (404: a vanished file)."""
        async with self.api.stream(
            "GET",
            self._url("/files"),
            operation=f"{self.provider}: envd read file",
            expected=(404,),
            params={"path": path, "username": "root"},
            headers=self._headers(),
            timeout=_FILE_TIMEOUT,
        ) as response:
            yield response

    async def upload(self, path: str, data: bytes) -> None:
        """``POST /files?path=`` (envd truncates or creates).

        The raw bytes as ``application/octet-stream`` from envd 0.5.7 on; a
        ``multipart/form-data`` part named ``file`` before (templates keep the
        envd they were built with), as the SDK does.
        """
        body: dict[str, Any]
        if at_least(self.version, OCTET_STREAM_SINCE):
            body = {
                "content": data,
                "headers": self._headers({"Content-Type": "application/octet-stream"}),
            }
        else:
            body = {"files": {"file": (path, data)}, "headers": self._headers()}
        await self.api.request(
            "POST",
            self._url("/files"),
            operation=f"{self.provider}: envd write file",
            idempotent=True,
            params={"path": path, "username": "root"},
            timeout=_FILE_TIMEOUT,
            deadline=transfer_deadline(len(data)),
            **body,
        )

    async def upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        """``POST /files?path=`` with the body sent as ``chunks`` yields it (chunked encoding).

        The same two forms as :meth:`upload` (the raw stream from envd 0.5.7,
        a streamed multipart part ``file`` before); never retried (the chunks
        cannot be replayed), and no overall deadline: httpx's write and read
        timeouts bound every chunk and the answer.
        """
        headers: dict[str, str]
        if at_least(self.version, OCTET_STREAM_SINCE):
            content, headers = chunks, {"Content-Type": "application/octet-stream"}
        else:
            form = multipart_body((), file_field="file", filename=path, chunks=chunks)
            content, headers = form.chunks, {"Content-Type": form.content_type}
        await self.api.request(
            "POST",
            self._url("/files"),
            operation=f"{self.provider}: envd write file",
            idempotent=False,
            params={"path": path, "username": "root"},
            timeout=_FILE_TIMEOUT,
            deadline=math.inf,
            content=content,
            headers=self._headers(headers),
        )

    @contextlib.asynccontextmanager
    async def start(
        self,
        *,
        cmd: str,
        args: list[str],
        cwd: str,
        stdin: bool,
        tag: str,
        timeout_ms: int | None = None,
    ) -> AsyncIterator[AsyncIterator[Envelope]]:
        """``process.Process/Start``: open the stream and yield its envelopes.

        Never retried: a lost answer may have started the process. A transport
        error while the envelopes are read (the stream cut, as when the
        sandbox is killed with envd inside) is :class:`RemoteUnavailable`
        with no status, raised from the iteration itself.
        """
        request = {
            "process": {"cmd": cmd, "args": args, "envs": {}, "cwd": cwd},
            "stdin": stdin,
            "tag": tag,
        }
        headers = {
            "Content-Type": CONNECT_CONTENT_TYPE,
            "Connect-Protocol-Version": "1",
            "Connect-Content-Encoding": "identity",
            "Connect-Accept-Encoding": "identity",
            "Keepalive-Ping-Interval": "50",
        }
        if timeout_ms is not None:
            headers["Connect-Timeout-Ms"] = str(max(1, timeout_ms))
        operation = f"{self.provider}: envd start process"
        async with self.api.stream(
            "POST",
            self._url("/process.Process/Start"),
            operation=operation,
            idempotent=False,
            content=encode_envelope(request),
            headers=self._headers(headers),
            timeout=_STREAM_TIMEOUT,
        ) as response:
            secrets = (*self.api.secrets, *self.address.headers.values())
            yield _mapped(decode_envelopes(response.aiter_raw()), operation, secrets)

    async def send_input(self, pid: int, data: bytes) -> bool:
        """``SendInput``: bytes for the process's stdin; ``False`` if the process is gone.

        Not retried: a repeat could deliver the bytes twice.
        """
        payload = {
            "process": {"pid": pid},
            "input": {"stdin": base64.b64encode(data).decode("ascii")},
        }
        response = await self._unary("process.Process/SendInput", payload, idempotent=False)
        return response.status_code != 404

    async def close_stdin(self, pid: int) -> bool:
        """``CloseStdin``: the process reads end-of-file; ``False`` if it is gone."""
        response = await self._unary(
            "process.Process/CloseStdin", {"process": {"pid": pid}}, idempotent=True
        )
        return response.status_code != 404

    async def kill(self, pid: int) -> bool:
        """``SendSignal`` SIGKILL to ``pid`` (the process only); ``False`` if it is gone."""
        response = await self._unary(
            "process.Process/SendSignal",
            {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"},
            idempotent=True,
        )
        return response.status_code != 404

    @contextlib.asynccontextmanager
    async def connect(self, tag: str) -> AsyncIterator[AsyncIterator[Envelope]]:
        """``process.Process/Connect`` to the running process started with ``tag``.

        A server stream like :meth:`start`'s: a ``start`` event, then the output
        written *from now on* (envd replays nothing), then ``end``. A process
        that is no longer running is a ``not_found`` end-of-stream error (older
        envd) or a ``start`` and a retained ``end`` (newer envd). Read-only, so
        opening it may be retried.
        """
        operation = f"{self.provider}: envd connect to process"
        headers = {
            "Content-Type": CONNECT_CONTENT_TYPE,
            "Connect-Protocol-Version": "1",
            "Connect-Content-Encoding": "identity",
            "Connect-Accept-Encoding": "identity",
            "Keepalive-Ping-Interval": "50",
        }
        async with self.api.stream(
            "POST",
            self._url("/process.Process/Connect"),
            operation=operation,
            idempotent=True,
            expected=(404,),
            content=encode_envelope({"process": {"tag": tag}}),
            headers=self._headers(headers),
            timeout=_STREAM_TIMEOUT,
        ) as response:
            secrets = (*self.api.secrets, *self.address.headers.values())
            if response.status_code == 404:
                yield _no_envelopes()
                return
            yield _mapped(decode_envelopes(response.aiter_raw()), operation, secrets)

    async def running(self) -> dict[str, int]:
        """``List``: the tag and pid of every running process envd started with a tag."""
        response = await self._unary("process.Process/List", {}, idempotent=True)
        if response.status_code == 404:
            raise RemoteUnavailable(f"{self.provider}: envd List: HTTP 404")
        answer = json_answer(response, operation=f"{self.provider}: envd List", shape=dict)
        processes = answer.get("processes", [])
        found: dict[str, int] = {}
        for process in processes if isinstance(processes, list) else []:
            if not isinstance(process, dict):
                continue
            tag, pid = process.get("tag"), process.get("pid")
            if isinstance(tag, str) and isinstance(pid, int) and not isinstance(pid, bool):
                found[tag] = pid
        return found

    async def pid_of(self, tag: str) -> int | None:
        """The pid of the running process started with ``tag`` (``List``), or ``None``."""
        response = await self._unary("process.Process/List", {}, idempotent=True)
        if response.status_code == 404:
            raise RemoteUnavailable(f"{self.provider}: envd List: HTTP 404")
        answer = json_answer(response, operation=f"{self.provider}: envd List", shape=dict)
        processes = answer.get("processes", [])
        for process in processes if isinstance(processes, list) else []:
            if isinstance(process, dict) and process.get("tag") == tag:
                pid = process.get("pid")
                return pid if isinstance(pid, int) else None
        return None
