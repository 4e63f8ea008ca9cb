"""A fake E2B service (control plane and envd on one port), and its CubeSandbox mode.

It speaks the wire protocol the official ``e2b`` SDK speaks (tests drive it
with that SDK) and the one mango's provider speaks; where they could
disagree, the SDK decides. Sandboxes are the kit's fake sandboxes (real
local process sandboxes): the workspace ``/workspace`` is a host directory,
commands are real processes (:mod:`mango_provider_e2b.fake.processes`), and
absolute paths under ``/workspace`` in a command's arguments, its cwd or a
file call are mapped onto that directory (the only part of a sandbox's file
system the fake has).

Routing of envd calls: by the ``E2b-Sandbox-Id`` header (the SDK with one
``sandbox_url``; mango with ``E2B_SANDBOX_URL``) or by the virtual host
``49983-<id>.<domain>`` in ``Host`` (mango's Cube proxy-node routing).

Modes (:class:`FakeConfig`): ``e2b`` authenticates the control plane with
``X-API-Key``; ``cube`` with ``Authorization: Bearer`` (or ``X-API-Key``, as
CubeAPI does), requires the key on the data plane too, and names its domain
in every sandbox answer. Lifecycle: a sandbox's ``timeout`` runs from create,
connect or ``/timeout``; when it passes, the sandbox pauses (``autoPause``) or
is deleted. A paused or deleted sandbox's data plane answers as E2B's proxy
does: 502 ``The sandbox was not found``; a deleted one's ``GET`` is a 404, and
the process streams running in it are cut (no ``end`` event), as when E2B
kills the sandbox's VM with envd inside.
"""

from __future__ import annotations

import asyncio
import base64
import os
import posixpath
import shutil
import signal
import stat as stat_module
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, FakeService, SandboxState
from mango_provider_e2b.connect import ConnectError, decode_envelopes, encode_envelope, end_stream
from mango_provider_e2b.fake.processes import FakeProcess, go_status

__all__ = ["CUBE_MODE", "E2B_MODE", "WORKSPACE", "E2BFakeService", "FakeConfig", "mango_settings"]

E2B_MODE = "e2b"
CUBE_MODE = "cube"
WORKSPACE = "/workspace"
"""The one directory of a fake sandbox's file system."""
_PROCESSES = "processes"
_ENVD_PREFIXES = ("/process.Process/", "/filesystem.Filesystem/", "/files")
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


@attrs.frozen
class FakeConfig:
    """How the fake behaves: vendor mode, credentials, domain, envd version, page size."""

    mode: str = E2B_MODE
    api_key: str | None = attrs.field(default="e2b_fake_key", repr=False)
    domain: str = "e2b.local"
    envd_version: str = "0.5.8"
    page_size: int = 100
    default_timeout: int = 300


def mango_settings(url: str, config: FakeConfig) -> dict[str, str]:
    """The settings that point mango's provider (``e2b`` or ``cube``, by mode) at a fake at ``url``.

    What a deployment exports: ``MANGO_SANDBOX`` and the provider's documented
    variables (the API key included: the fake's own, never a real one).
    """
    address = urllib.parse.urlsplit(url)
    key = config.api_key or ""
    if config.mode == CUBE_MODE:
        return {
            "MANGO_SANDBOX": "cube",
            "CUBE_API_URL": url,
            "CUBE_TEMPLATE_ID": "base",
            "CUBE_API_KEY": key,
            "CUBE_SANDBOX_DOMAIN": config.domain,
            "CUBE_PROXY_NODE_IP": address.hostname or "127.0.0.1",
            "CUBE_PROXY_PORT_HTTP": str(address.port or 80),
            "CUBE_PROXY_SCHEME": "http",
        }
    return {
        "MANGO_SANDBOX": "e2b",
        "E2B_API_URL": url,
        "E2B_SANDBOX_URL": url,
        "E2B_API_KEY": key,
    }


class _Reply(Exception):
    """A finished error response, raised out of a helper."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _api_error(status: int, message: str) -> _Reply:
    return _Reply(web.json_response({"code": status, "message": message}, status=status))


def _connect_error(code: str, message: str) -> _Reply:
    return _Reply(
        web.json_response({"code": code, "message": message}, status=_CONNECT_STATUS[code])
    )


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _replying(handler: Any) -> Any:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except _Reply as reply:
            return reply.response
        return response

    return wrapped


@attrs.define(eq=False)
class E2BFakeService(FakeService):
    """The kit's :class:`FakeService` serving the E2B routes of ``config`` (module docstring)."""

    config: FakeConfig = attrs.field(factory=FakeConfig, kw_only=True)
    _timers: dict[str, asyncio.TimerHandle] = attrs.field(factory=dict, init=False, repr=False)
    _deleting: set[asyncio.Future[Any]] = attrs.field(factory=set, init=False, repr=False)
    _changed: asyncio.Condition = attrs.field(factory=asyncio.Condition, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # The fake sends everything a command prints, as envd does: mango's cap is mango's.
        self.sandboxes.max_output_bytes = 1 << 62

    @classmethod
    def create(
        cls, scratch_dir: Path | str, config: FakeConfig | None = None, **options: Any
    ) -> E2BFakeService:
        """A service over ``scratch_dir`` serving the routes of ``config``."""
        return cls(scratch_dir, _routes, config=config or FakeConfig(), **options)

    # ------------------------------------------------------------ test controls

    def processes(self, sandbox_id: str) -> dict[int, FakeProcess]:
        """The processes the fake envd started in ``sandbox_id`` (still running or not)."""
        record = self.sandboxes.find(sandbox_id)
        if record is None:
            return {}
        table: dict[int, FakeProcess] = record.extra.setdefault(_PROCESSES, {})
        return table

    async def delete_sandbox(self, sandbox_id: str) -> bool:
        """Delete a sandbox (killing its processes): also how a test deletes one behind mango."""
        for process in self.processes(sandbox_id).values():
            process.kill_tree()
        self._cancel_timer(sandbox_id)
        deleted = await self.sandboxes.delete(sandbox_id)
        self._notify()
        return deleted

    def pause_sandbox(self, sandbox_id: str) -> None:
        """Pause a sandbox now (as its idle timeout would)."""
        self._cancel_timer(sandbox_id)
        self.sandboxes.pause(sandbox_id)
        self._notify()

    def state(self, sandbox_id: str) -> str | None:
        """``running``, ``paused``, ``deleted`` or ``None`` (never existed)."""
        record = self.sandboxes.find(sandbox_id)
        return None if record is None else record.state.value

    async def wait_for_state(self, sandbox_id: str, state: str, *, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the sandbox is in ``state``; False if not."""
        return await self.wait_until(lambda: self.state(sandbox_id) == state, timeout=timeout)

    async def wait_until(self, condition: Callable[[], bool], *, timeout: float) -> bool:
        """Wait until ``condition()`` holds (re-checked on every lifecycle change and start)."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(condition)
            except TimeoutError:
                return False
        return True

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = asyncio.ensure_future(notify())
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    def end_at(self, sandbox_id: str) -> datetime | None:
        """When the sandbox pauses (or dies) unless someone extends it."""
        record = self.sandboxes.find(sandbox_id)
        return None if record is None else record.extra.get("end_at")

    async def stop(self) -> None:
        """Kill every process, then stop the kit's service."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for record in self.sandboxes.list():
            for process in self.processes(record.id).values():
                process.kill_tree()
        await super().stop()

    # ------------------------------------------------------------ lifecycle timers

    def _cancel_timer(self, sandbox_id: str) -> None:
        handle = self._timers.pop(sandbox_id, None)
        if handle is not None:
            handle.cancel()

    def _arm(self, record: FakeSandbox, seconds: float) -> None:
        self._cancel_timer(record.id)
        record.extra["end_at"] = datetime.now(UTC) + timedelta(seconds=seconds)
        loop = asyncio.get_running_loop()
        self._timers[record.id] = loop.call_later(seconds, self._expire, record.id)

    def _expire(self, sandbox_id: str) -> None:
        self._timers.pop(sandbox_id, None)
        record = self.sandboxes.find(sandbox_id)
        if record is None or record.state is not SandboxState.RUNNING:
            return
        if record.extra.get("auto_pause"):
            self.sandboxes.pause(sandbox_id)
            self._notify()
        else:
            task = asyncio.ensure_future(self.delete_sandbox(sandbox_id))
            self._deleting.add(task)
            task.add_done_callback(self._deleting.discard)


def _routes(service: FakeService) -> Iterable[web.AbstractRouteDef]:
    if not isinstance(service, E2BFakeService):
        raise TypeError("the E2B routes need an E2BFakeService")
    return _Routes(service).routes()


@attrs.define(eq=False)
class _Routes:
    service: E2BFakeService

    @property
    def config(self) -> FakeConfig:
        return self.service.config

    def routes(self) -> list[web.AbstractRouteDef]:
        wrap = _replying
        return [
            web.post("/sandboxes", wrap(self.create)),
            web.post("/v2/sandboxes", wrap(self.create)),
            web.get("/sandboxes", wrap(self.list_v1)),
            web.get("/v2/sandboxes", wrap(self.list_v2)),
            web.get("/sandboxes/{id}", wrap(self.get)),
            web.delete("/sandboxes/{id}", wrap(self.kill)),
            web.post("/sandboxes/{id}/connect", wrap(self.connect)),
            web.post("/v2/sandboxes/{id}/connect", wrap(self.connect)),
            web.post("/sandboxes/{id}/timeout", wrap(self.set_timeout)),
            web.post("/sandboxes/{id}/pause", wrap(self.pause)),
            web.post("/sandboxes/{id}/resume", wrap(self.resume)),
            web.get("/health", wrap(self.health)),
            web.post("/process.Process/Start", wrap(self.start)),
            web.post("/process.Process/{method}", wrap(self.process_unary)),
            web.post("/filesystem.Filesystem/{method}", wrap(self.filesystem)),
            web.get("/files", wrap(self.read_file)),
            web.post("/files", wrap(self.write_file)),
        ]

    # ------------------------------------------------------------ control plane

    def _authenticate(self, request: web.Request, *, data_plane: bool = False) -> None:
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
            raise _api_error(401, "Invalid API key")

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json() if await request.read() else {}
        except ValueError:
            raise _api_error(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _api_error(400, "the body is not a JSON object")
        return body

    def _record(self, request: web.Request) -> FakeSandbox:
        sandbox_id = request.match_info["id"]
        record = self.service.sandboxes.find(sandbox_id)
        if record is None or record.state is SandboxState.DELETED:
            raise _api_error(404, f"sandbox {sandbox_id!r} not found")
        return record

    def _sandbox_json(self, record: FakeSandbox) -> dict[str, Any]:
        body: dict[str, Any] = {
            "sandboxID": record.id,
            "templateID": record.extra.get("template", "base"),
            "clientID": "fake",
            "envdVersion": self.config.envd_version,
            "envdAccessToken": record.token,
        }
        if self.config.mode == CUBE_MODE:
            body["domain"] = self.config.domain
        return body

    def _listed_json(self, record: FakeSandbox) -> dict[str, Any]:
        end_at = record.extra.get("end_at") or record.created_at
        return {
            **{k: v for k, v in self._sandbox_json(record).items() if k != "envdAccessToken"},
            "startedAt": _iso(record.created_at),
            "endAt": _iso(end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": record.state.value,
            "metadata": record.metadata,
        }

    async def create(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        body = await self._json_body(request)
        template = body.get("templateID")
        if not isinstance(template, str) or not template:
            raise _api_error(400, "templateID is required")
        if template.startswith("missing"):
            raise _api_error(404, f"template {template!r} not found")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise _api_error(400, "metadata must map strings to strings")
        timeout = body.get("timeout", self.config.default_timeout)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise _api_error(400, "timeout must be a positive whole number of seconds")
        lifecycle = _object(body.get("lifecycle"))
        auto_pause = bool(body.get("autoPause")) or lifecycle.get("onTimeout") == "pause"
        record = await self.service.sandboxes.create(
            metadata,
            extra={
                "template": template,
                "auto_pause": auto_pause,
                "internet": body.get("allow_internet_access", body.get("allowInternetAccess")),
                "request": body,
                _PROCESSES: {},
            },
        )
        self.service._arm(record, timeout)
        return web.json_response(self._sandbox_json(record), status=201)

    def _filtered(self, request: web.Request, states: set[str]) -> list[FakeSandbox]:
        wanted: dict[str, str] = {}
        text = request.query.get("metadata", "")
        if text:
            wanted = dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
        state_text = request.query.get("state", "")
        if state_text:
            states = {part.strip() for part in state_text.split(",") if part.strip()}
        return [
            record for record in self.service.sandboxes.list(wanted) if record.state.value in states
        ]

    async def list_v1(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        records = self._filtered(request, {SandboxState.RUNNING.value})
        return web.json_response([self._listed_json(record) for record in records])

    async def list_v2(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        records = self._filtered(request, {SandboxState.RUNNING.value, SandboxState.PAUSED.value})
        try:
            limit = int(request.query.get("limit", str(self.config.page_size)))
        except ValueError:
            raise _api_error(400, "limit must be a number") from None
        limit = max(1, min(limit, self.config.page_size))
        start = 0
        token = request.query.get("nextToken", "")
        if token:
            ids = [record.id for record in records]
            if token not in ids:
                raise _api_error(400, "invalid nextToken")
            start = ids.index(token)
        page = records[start : start + limit]
        headers = {}
        if start + limit < len(records):
            headers["X-Next-Token"] = records[start + limit].id
        return web.json_response([self._listed_json(r) for r in page], headers=headers)

    async def get(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        return web.json_response(
            {
                **self._listed_json(record),
                "envdAccessToken": record.token,
                "domain": self.config.domain,
            }
        )

    async def kill(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        await self.service.delete_sandbox(record.id)
        return web.Response(status=204)

    async def connect(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        body = await self._json_body(request)
        timeout = body.get("timeout")
        resumed = record.state is SandboxState.PAUSED
        if resumed:
            self.service.sandboxes.resume(record.id)
        if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
            end_at = record.extra.get("end_at")
            remaining = (end_at - datetime.now(UTC)).total_seconds() if end_at else 0.0
            # connect never shortens a running sandbox's life
            if resumed or timeout > remaining:
                self.service._arm(record, timeout)
        elif resumed:
            self.service._arm(record, self.config.default_timeout)
        return web.json_response(self._sandbox_json(record), status=201 if resumed else 200)

    async def set_timeout(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        timeout = (await self._json_body(request)).get("timeout")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise _api_error(400, "timeout must be a positive whole number of seconds")
        if record.state is SandboxState.RUNNING:
            self.service._arm(record, timeout)
        return web.Response(status=204)

    async def pause(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        if record.state is SandboxState.PAUSED:
            raise _api_error(409, "sandbox is already paused")
        self.service.pause_sandbox(record.id)
        return web.Response(status=204)

    async def resume(self, request: web.Request) -> web.Response:
        self._authenticate(request)
        record = self._record(request)
        if record.state is SandboxState.RUNNING:
            raise _api_error(409, "sandbox is already running")
        self.service.sandboxes.resume(record.id)
        self.service._arm(record, self.config.default_timeout)
        return web.json_response(self._sandbox_json(record), status=201)

    async def health(self, request: web.Request) -> web.Response:
        if self._envd_id(request) is not None:
            self._envd_record(request)
            return web.Response(status=204)
        return web.json_response({"status": "ok", "sandboxes": len(self.service.sandboxes.list())})

    # ------------------------------------------------------------ envd: routing, auth, paths

    def _envd_id(self, request: web.Request) -> str | None:
        header = request.headers.get("E2b-Sandbox-Id")
        if header:
            return header
        host = request.host.rsplit(":", 1)[0] if request.host.count(":") == 1 else request.host
        prefix, _, domain = host.partition(".")
        port, dash, sandbox_id = prefix.partition("-")
        if dash and port.isdigit() and sandbox_id and domain == self.config.domain:
            return sandbox_id
        return None

    def _envd_record(self, request: web.Request) -> FakeSandbox:
        sandbox_id = self._envd_id(request)
        if sandbox_id is None:
            raise _api_error(400, "no sandbox named (E2b-Sandbox-Id or Host)")
        record = self.service.sandboxes.find(sandbox_id)
        if record is None or record.state is not SandboxState.RUNNING:
            # E2B's proxy: a deleted or paused sandbox is "not found" with a 502.
            raise _Reply(
                web.json_response(
                    {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502},
                    status=502,
                )
            )
        if self.config.mode == CUBE_MODE:
            self._authenticate(request, data_plane=True)
        if request.headers.get("X-Access-Token") != record.token:
            raise _connect_error("unauthenticated", "invalid or missing X-Access-Token")
        return record

    @staticmethod
    def _workspace(record: FakeSandbox) -> str:
        return str(record.local.root)

    def _host_path(self, record: FakeSandbox, path: str, *, cwd: bool = False) -> str:
        if not path:
            return self._workspace(record)
        if not path.startswith("/"):
            path = posixpath.join(WORKSPACE, path)  # the fake's home is the workspace
        path = posixpath.normpath(path)
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return self._workspace(record) + path[len(WORKSPACE) :]
        if cwd and path == "/":
            return self._workspace(record)
        raise _connect_error("permission_denied", f"the fake sandbox has only {WORKSPACE}: {path}")

    def _sandbox_path(self, record: FakeSandbox, host: str) -> str:
        return WORKSPACE + host[len(self._workspace(record)) :]

    # ------------------------------------------------------------ envd: processes

    async def start(self, request: web.Request) -> web.StreamResponse:
        record = self._envd_record(request)
        process = await self._spawn(request, record)
        self.service.processes(record.id)[process.pid] = process
        self.service._notify()
        return await self._stream(request, process)

    async def _spawn(self, request: web.Request, record: FakeSandbox) -> FakeProcess:
        if request.headers.get("Content-Type", "").split(";")[0] != "application/connect+json":
            raise _connect_error("invalid_argument", "expected application/connect+json")
        envelopes = [envelope async for envelope in decode_envelopes(_once(await request.read()))]
        if len(envelopes) != 1:
            raise _connect_error("invalid_argument", "expected exactly one request envelope")
        body = envelopes[0].payload
        config = _object(body.get("process"))
        cmd = config.get("cmd")
        args = config.get("args") or []
        if not isinstance(cmd, str) or not isinstance(args, list):
            raise _connect_error("invalid_argument", "process.cmd and process.args are required")
        workspace = self._workspace(record)
        cwd = self._host_path(record, str(config.get("cwd") or WORKSPACE), cwd=True)
        if not os.path.isdir(cwd):
            raise _connect_error("invalid_argument", f"cwd '{config.get('cwd')}' does not exist")
        envs = _object(config.get("envs"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": workspace,
            "LANG": "C.UTF-8",
            "USER": "root",
            **{str(k): str(v) for k, v in envs.items()},
        }
        stdin = body.get("stdin", True) is not False
        tag = body.get("tag") if isinstance(body.get("tag"), str) else None
        try:
            process = await FakeProcess.start(
                cmd,
                [str(arg).replace(WORKSPACE, workspace) for arg in args],
                cwd=cwd,
                env=env,
                stdin=stdin,
                tag=tag,
                config=config,
            )
        except OSError as exc:
            raise _connect_error("invalid_argument", f"error starting process: {exc}") from None
        return process

    async def _stream(self, request: web.Request, process: FakeProcess) -> web.StreamResponse:
        timer = None
        timed_out = asyncio.Event()
        timeout_ms = request.headers.get("Connect-Timeout-Ms", "")
        if timeout_ms.isdigit():

            def expire() -> None:
                timed_out.set()
                process.signal(signal.SIGKILL)

            timer = asyncio.get_running_loop().call_later(int(timeout_ms) / 1000, expire)
        response = web.StreamResponse(headers={"Content-Type": "application/connect+json"})
        try:
            await response.prepare(request)
            await response.write(encode_envelope({"event": {"start": {"pid": process.pid}}}))
            ended = 0
            while ended < 2:
                event = await process.next_event()
                if event is None:
                    ended += 1
                    continue
                name, chunk = event
                data = {name: base64.b64encode(chunk).decode("ascii")}
                await response.write(encode_envelope({"event": {"data": data}}))
            returncode = await process.wait()
            if process.torn_down:
                # The sandbox was deleted and envd with it: no end event, no end of stream.
                # E2B's proxy aborts the response (Go's ErrAbortHandler), as done here.
                if request.transport is not None:
                    request.transport.abort()
                return response
            if timed_out.is_set():
                await response.write(end_stream(ConnectError("deadline_exceeded", "timed out")))
            else:
                await response.write(encode_envelope({"event": {"end": go_status(returncode)}}))
                await response.write(end_stream())
            await response.write_eof()
        except ConnectionResetError:
            # The client left: envd lets the process run on and drops its output.
            process.stop_listening()
        except asyncio.CancelledError:
            process.stop_listening()
            raise
        finally:
            if timer is not None and process.process.returncode is not None:
                timer.cancel()
        return response

    def _process(self, record: FakeSandbox, body: dict[str, Any]) -> FakeProcess:
        selector = _object(body.get("process"))
        table = self.service.processes(record.id)
        pid = selector.get("pid")
        tag = selector.get("tag")
        for process in table.values():
            running = process.process.returncode is None
            if running and (
                (pid is not None and process.pid == pid) or (tag and process.tag == tag)
            ):
                return process
        raise _connect_error("not_found", f"process with pid {pid} not found")

    async def process_unary(self, request: web.Request) -> web.Response:
        record = self._envd_record(request)
        method = request.match_info["method"]
        body = await self._json_body(request)
        if method == "List":
            running = [
                {"pid": p.pid, "config": p.config, **({"tag": p.tag} if p.tag else {})}
                for p in self.service.processes(record.id).values()
                if p.process.returncode is None
            ]
            return web.json_response({"processes": running})
        process = self._process(record, body)
        if method == "SendInput":
            data = (body.get("input") or {}).get("stdin")
            if not isinstance(data, str):
                raise _connect_error("invalid_argument", "input.stdin is required")
            try:
                await process.write_stdin(base64.b64decode(data))
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise _connect_error("internal", f"error writing to stdin: {exc}") from None
            return web.json_response({})
        if method == "CloseStdin":
            process.close_stdin()
            return web.json_response({})
        if method == "SendSignal":
            number = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}.get(
                str(body.get("signal"))
            )
            if number is None and body.get("signal") in (9, 15):
                number = signal.Signals(body["signal"])
            if number is None:
                raise _connect_error("unimplemented", f"invalid signal: {body.get('signal')}")
            process.signal(number)
            return web.json_response({})
        raise _connect_error("unimplemented", f"process.Process/{method} is not faked")

    # ------------------------------------------------------------ envd: files

    def _entry(self, record: FakeSandbox, host: str) -> dict[str, Any]:
        info = os.lstat(host)
        if stat_module.S_ISLNK(info.st_mode):
            kind = "FILE_TYPE_SYMLINK"
        elif stat_module.S_ISDIR(info.st_mode):
            kind = "FILE_TYPE_DIRECTORY"
        elif stat_module.S_ISREG(info.st_mode):
            kind = "FILE_TYPE_FILE"
        else:
            kind = "FILE_TYPE_UNSPECIFIED"
        path = self._sandbox_path(record, host)
        return {
            "name": posixpath.basename(path) or "/",
            "type": kind,
            "path": path,
            "size": str(info.st_size),
            "mode": stat_module.S_IMODE(info.st_mode),
            "permissions": stat_module.filemode(info.st_mode),
            "owner": "root",
            "group": "root",
            "modifiedTime": _iso(datetime.fromtimestamp(info.st_mtime, UTC)),
        }

    async def filesystem(self, request: web.Request) -> web.Response:
        record = self._envd_record(request)
        method = request.match_info["method"]
        body = await self._json_body(request)
        path = body.get("path")
        if not isinstance(path, str):
            raise _connect_error("invalid_argument", "path is required")
        host = self._host_path(record, path)
        if method == "Stat":
            try:
                return web.json_response({"entry": self._entry(record, host)})
            except FileNotFoundError:
                raise _connect_error("not_found", f"file not found: {path}") from None
            except NotADirectoryError:
                raise _connect_error("not_found", f"file not found: {path}") from None
        if method == "MakeDir":
            if os.path.isdir(host):
                raise _connect_error("already_exists", f"directory already exists: {path}")
            try:
                os.makedirs(host, exist_ok=True)
            except OSError as exc:
                raise _connect_error("internal", f"error creating directory: {exc}") from None
            return web.json_response({"entry": self._entry(record, host)})
        if method == "Remove":
            try:
                if os.path.isdir(host) and not os.path.islink(host):
                    await asyncio.to_thread(shutil.rmtree, host)
                else:
                    os.unlink(host)
            except FileNotFoundError:
                raise _connect_error("not_found", f"file not found: {path}") from None
            return web.json_response({})
        raise _connect_error("unimplemented", f"filesystem.Filesystem/{method} is not faked")

    async def read_file(self, request: web.Request) -> web.StreamResponse:
        record = self._envd_record(request)
        host = self._host_path(record, request.query.get("path", ""))
        if not os.path.exists(host):
            raise _api_error(404, f"path '{request.query.get('path')}' does not exist")
        if os.path.isdir(host):
            raise _api_error(400, f"path '{request.query.get('path')}' is a directory")
        return web.FileResponse(host, headers={"Content-Type": "application/octet-stream"})

    async def write_file(self, request: web.Request) -> web.Response:
        record = self._envd_record(request)
        sandbox_path = request.query.get("path", "")
        host = self._host_path(record, sandbox_path)
        if os.path.isdir(host):
            raise _api_error(400, f"path '{sandbox_path}' is a directory")
        os.makedirs(os.path.dirname(host), exist_ok=True)
        content_type = request.headers.get("Content-Type", "")
        with open(host, "wb") as handle:
            if content_type.startswith("multipart/form-data"):
                reader = await request.multipart()
                async for part in reader:
                    if getattr(part, "name", None) == "file":
                        while chunk := await part.read_chunk():  # type: ignore[union-attr]
                            handle.write(chunk)
            else:
                async for chunk in request.content.iter_chunked(1 << 20):
                    handle.write(chunk)
        return web.json_response(
            [{"name": posixpath.basename(sandbox_path), "type": "file", "path": sandbox_path}]
        )


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
