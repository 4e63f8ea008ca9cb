"""The fake server: lifecycle API, server proxy and direct endpoints (see the package)."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import attrs
from aiohttp import web

from mango.fakes import (
    UNCAPPED_OUTPUT,
    FakeSandbox,
    FakeService,
    SandboxState,
    continue_marked,
    forward_to_port,
    is_string_map,
    mark,
    rfc3339,
    stop_marked,
)
from mango.provider import SandboxNotFound
from mango_provider_opensandbox.fake.background import BackgroundCommand
from mango_provider_opensandbox.fake.common import error
from mango_provider_opensandbox.fake.egress import EgressRoutes, rules_of
from mango_provider_opensandbox.fake.execd import ExecdRoutes
from mango_provider_opensandbox.fake.gateway import EgressGateway
from mango_provider_opensandbox.fake.image import IMAGE_PATH, fsroot_of, prepare_image
from mango_provider_opensandbox.layout import (
    API_KEY_HEADER,
    EGRESS_AUTH_HEADER,
    EGRESS_PORT,
    EXECD_PORT,
    EXECD_TOKEN_HEADER,
)

__all__ = ["DEFAULT_FAKE_API_KEY", "UNPULLABLE_PREFIX", "FakeOpenSandbox"]

DEFAULT_FAKE_API_KEY = "fake-opensandbox-key"
UNPULLABLE_PREFIX = "unpullable/"
"""Images whose name starts so cannot be pulled (HTTP 500 ``DOCKER::SANDBOX_IMAGE_PULL_FAILED``)."""
_HOST_PATH = "/usr/local/bin:/usr/bin:/bin"


@attrs.define(eq=False)
class FakeOpenSandbox(ExecdRoutes, EgressRoutes):
    """A fake OpenSandbox server; ``async with FakeOpenSandbox(tmp) as fake: fake.url``.

    ``api_key`` is the key the lifecycle API wants (``None``: no auth).
    ``grace_seconds`` is how long execd keeps a finished command's stream
    open (1 s on the real server), ``ping_seconds`` its keep-alive interval.
    ``apt_source`` is the package mirror in the emulated image's
    ``sources.list`` (:mod:`~mango_provider_opensandbox.fake.image`);
    :attr:`upstream` maps the host names a test serves to their address.
    """

    scratch_dir: Path = attrs.field(converter=Path)
    api_key: str | None = DEFAULT_FAKE_API_KEY
    grace_seconds: float = 1.0
    ping_seconds: float = 3.0
    shell: str = attrs.field(factory=lambda: "bash" if shutil.which("bash") else "sh")
    apt_source: str | None = None
    egress_image: bool = True
    """Whether the server has an egress sidecar image (``egress.image``); without one a create
    with a ``networkPolicy`` is refused (400), as the server refuses it."""
    execd_boot_requests: int = 0
    """How many data-plane requests of a fresh sandbox find execd not listening yet (502)."""
    service: FakeService = attrs.field(init=False)
    gateway: EgressGateway = attrs.field(init=False)
    """Where every sandbox's HTTP goes: its egress policy is enforced there."""
    _commands: dict[str, asyncio.Future[Any]] = attrs.field(init=False, factory=dict)
    _background: dict[str, BackgroundCommand] = attrs.field(init=False, factory=dict)
    _transitions: set[asyncio.Task[None]] = attrs.field(init=False, factory=set)
    direct_api_keys: list[str | None] = attrs.field(init=False, factory=list)
    """The API key header of every direct data-plane request (it must never be there)."""

    def __attrs_post_init__(self) -> None:
        # execd streams everything a command prints; the client caps it.
        self.service = FakeService(
            self.scratch_dir, self._routes, name="opensandbox", max_output_bytes=UNCAPPED_OUTPUT
        )
        self.gateway = EgressGateway(self._live)

    # ------------------------------------------------------------------ running

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``OPEN_SANDBOX_DOMAIN``)."""
        return self.service.url

    @property
    def faults(self) -> Any:
        """The service's :class:`~mango.fakes.Faults`."""
        return self.service.faults

    @property
    def upstream(self) -> dict[str, str]:
        """Host name -> address: the names the gateway resolves before the host's resolver."""
        return self.gateway.upstream

    async def start(self) -> str:
        """Serve; return :attr:`url`."""
        await self.gateway.start()
        return await self.service.start()

    async def stop(self) -> None:
        """Delete every sandbox and stop serving."""
        try:
            await self.service.stop()
        finally:
            await self.gateway.stop()

    async def __aenter__(self) -> FakeOpenSandbox:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ test helpers

    def sandbox(self, sandbox_id: str) -> FakeSandbox:
        """The record of a sandbox (any state)."""
        record = self.service.sandboxes.find(sandbox_id)
        if record is None:
            raise SandboxNotFound(f"fake OpenSandbox has no sandbox {sandbox_id!r}")
        return record

    def policy(self, sandbox_id: str) -> dict[str, Any] | None:
        """The egress policy the sidecar of ``sandbox_id`` enforces (``None``: no sidecar)."""
        policy = self.sandbox(sandbox_id).extra.get("policy")
        return policy if isinstance(policy, dict) else None

    def set_policy(self, sandbox_id: str, policy: dict[str, Any]) -> None:
        """Change the enforced policy behind the client's back (drift)."""
        self.sandbox(sandbox_id).extra["policy"] = json.loads(json.dumps(policy))

    async def delete(self, sandbox_id: str) -> bool:
        """Delete a sandbox behind the client's back."""
        return await self._remove(sandbox_id)

    async def _remove(self, sandbox_id: str) -> bool:
        deleted = await self.service.sandboxes.delete(sandbox_id)
        record = self.service.sandboxes.find(sandbox_id)
        thawed = record.extra.get("thawed") if record is not None else None
        if isinstance(thawed, asyncio.Event):
            thawed.set()  # a request held by the pause sees the deletion
        return deleted

    def _command_env(self, record: FakeSandbox) -> dict[str, str]:
        """The environment a command of ``record`` starts with: its image first, its egress."""
        fsroot = fsroot_of(Path(record.local.root))
        prepare_image(fsroot, self.apt_source)
        image = ":".join(str(fsroot / directory) for directory in IMAGE_PATH)
        # The mark lets a pause freeze the command's whole tree (and a delete kill it).
        return {
            "PATH": f"{image}:{_HOST_PATH}",
            **self.gateway.environment(record),
            **mark(record.id),
        }

    # ------------------------------------------------------------------ routes

    def _routes(self, _service: FakeService) -> Iterable[web.AbstractRouteDef]:
        routes: list[web.AbstractRouteDef] = []
        for prefix in ("/v1", ""):
            routes += [
                web.get(f"{prefix}/sandboxes", self._list),
                web.post(f"{prefix}/sandboxes", self._create),
                web.get(f"{prefix}/sandboxes/{{id}}", self._get),
                web.delete(f"{prefix}/sandboxes/{{id}}", self._delete),
                web.post(f"{prefix}/sandboxes/{{id}}/pause", self._pause),
                web.post(f"{prefix}/sandboxes/{{id}}/resume", self._resume),
                web.get(f"{prefix}/sandboxes/{{id}}/endpoints/{{port}}", self._endpoint),
                web.route(
                    "*", f"{prefix}/sandboxes/{{id}}/proxy/{{port:\\d+}}/{{tail:.*}}", self._proxy
                ),
                web.route("*", f"{prefix}/sandboxes/{{id}}/proxy/{{port:\\d+}}", self._proxy),
            ]
        routes.append(web.route("*", "/direct/{id}/{port:\\d+}/{tail:.*}", self._direct))
        routes.append(web.route("*", "/direct/{id}/{port:\\d+}", self._direct))
        return routes

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        given = request.headers.get(API_KEY_HEADER)
        if not given:
            return error(401, "MISSING_API_KEY", f"Provide API key via {API_KEY_HEADER} header.")
        if not secrets.compare_digest(given, self.api_key):
            return error(401, "INVALID_API_KEY", "Authentication credentials are invalid.")
        return None

    def _live(self, sandbox_id: str) -> FakeSandbox | None:
        return self.service.sandboxes.live(sandbox_id)

    @staticmethod
    def phase(record: FakeSandbox) -> str:
        """The lifecycle state the server reports: Running, Pausing, Paused or Resuming."""
        moving = record.extra.get("phase")
        if isinstance(moving, str):
            return moving
        return "Paused" if record.state is SandboxState.PAUSED else "Running"

    @classmethod
    def _document(cls, record: FakeSandbox, *, state: str | None = None) -> dict[str, Any]:
        extra = record.extra
        status = state or cls.phase(record)
        return {
            "id": record.id,
            "image": extra.get("image"),
            "status": {
                "state": status,
                "reason": status.lower(),
                "message": f"sandbox is {status.lower()}",
                "lastTransitionAt": rfc3339(record.created_at),
            },
            "metadata": dict(record.metadata),
            "entrypoint": list(extra.get("entrypoint") or []),
            "createdAt": rfc3339(record.created_at),
        }

    async def _list(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        wanted = dict(parse_qsl(request.query.get("metadata", ""), keep_blank_values=True))
        states = set(request.query.getall("state", []))
        try:
            page = int(request.query.get("page", "1"))
            size = int(request.query.get("pageSize", "20"))
        except ValueError:
            return error(400, "INVALID_REQUEST", "page and pageSize must be integers")
        if page < 1 or size < 1:
            return error(400, "INVALID_REQUEST", "page and pageSize must be at least 1")
        records = [
            self._document(record)
            for record in self.service.sandboxes.list(wanted)
            if not states or self._document(record)["status"]["state"] in states
        ]
        total_pages = (len(records) + size - 1) // size
        items = records[(page - 1) * size : page * size]
        pagination = {
            "page": page,
            "pageSize": size,
            "totalItems": len(records),
            "totalPages": total_pages,
            "hasNextPage": page < total_pages,
        }
        return web.json_response({"items": items, "pagination": pagination})

    async def _create(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        try:
            body = await request.json()
        except ValueError:
            return error(400, "INVALID_REQUEST", "the body is not JSON")
        problem = _create_problem(body)
        if problem is not None:
            return error(400, "INVALID_REQUEST", problem)
        if body.get("networkPolicy") is not None and not self.egress_image:
            # opensandbox_server.services.validators.ensure_egress_configured
            return error(
                400,
                "SANDBOX::INVALID_PARAMETER",
                "egress.image must be configured when networkPolicy is provided.",
            )
        uri = str(body["image"]["uri"])
        if uri.startswith(UNPULLABLE_PREFIX):
            # container_ops._pull_image: a DockerException is a 500 with this code.
            return error(
                500,
                "DOCKER::SANDBOX_IMAGE_PULL_FAILED",
                f"Failed to pull image {uri}: 404 Client Error: pull access denied for {uri}, "
                "repository does not exist",
            )
        policy = body.get("networkPolicy")
        if policy is not None:
            policy = {
                "defaultAction": str(policy.get("defaultAction") or "deny").lower(),
                "egress": [dict(rule) for rule in policy.get("egress") or []],
            }
        record = await self.service.sandboxes.create(
            body.get("metadata") or {},
            extra={
                "image": body.get("image"),
                "entrypoint": body.get("entrypoint"),
                "resourceLimits": body.get("resourceLimits"),
                "policy": policy,
                "egress_token": secrets.token_urlsafe(16),
                "execd_boot": self.execd_boot_requests,
            },
        )
        document = self._document(record, state="Pending")
        document.pop("image")
        return web.json_response(document, status=202)

    async def _get(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        record = self._live(request.match_info["id"])
        if record is None:
            return error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        return web.json_response(self._document(record))

    async def _delete(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        if not await self._remove(request.match_info["id"]):
            return error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        return web.Response(status=204)

    async def _pause(self, request: web.Request) -> web.Response:
        """``POST /sandboxes/{id}/pause``: 202, then Pausing until every process is frozen.

        As the server's Docker runtime does it (``container.pause()``, the
        cgroup freezer): processes keep their memory and a command's event
        stream stalls until the resume. Only a Running sandbox can pause: a
        Pausing, Paused or Resuming one is a 409 (the Kubernetes runtime's
        ``INVALID_STATE``; the Docker runtime's second pause fails with a
        500 from the Engine instead).
        """
        record = self._transition_target(request)
        if isinstance(record, web.Response):
            return record
        if self.phase(record) != "Running":
            return error(409, "DOCKER::SANDBOX_NOT_RUNNING", "Sandbox is not in a running state.")
        record.extra["phase"] = "Pausing"
        record.extra.setdefault("thawed", asyncio.Event()).clear()
        self._spawn(self._freeze(record))
        return web.Response(status=202)

    async def _resume(self, request: web.Request) -> web.Response:
        """``POST /sandboxes/{id}/resume``: 202, then Resuming until the processes go on.

        Only a Paused sandbox resumes; any other state is the runtime's 409
        ``SANDBOX_NOT_PAUSED``.
        """
        record = self._transition_target(request)
        if isinstance(record, web.Response):
            return record
        if self.phase(record) != "Paused":
            return error(409, "DOCKER::SANDBOX_NOT_PAUSED", "Sandbox is not in a paused state.")
        record.extra["phase"] = "Resuming"
        self._spawn(self._thaw(record))
        return web.Response(status=202)

    def _transition_target(self, request: web.Request) -> FakeSandbox | web.Response:
        """The live sandbox a pause or resume names, or the refusal to answer instead."""
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        record = self._live(request.match_info["id"])
        if record is None:
            return error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        return record

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._transitions.add(task)
        task.add_done_callback(self._transitions.discard)

    async def _freeze(self, record: FakeSandbox) -> None:
        await asyncio.to_thread(stop_marked, record.id)
        record.extra.pop("phase", None)
        if record.state is SandboxState.RUNNING:
            self.service.sandboxes.pause(record.id)

    async def _thaw(self, record: FakeSandbox) -> None:
        if record.state is SandboxState.PAUSED:
            self.service.sandboxes.resume(record.id)
        await asyncio.to_thread(continue_marked, record.id)
        record.extra.pop("phase", None)
        thawed = record.extra.get("thawed")
        if isinstance(thawed, asyncio.Event):
            thawed.set()

    async def held_until_running(self, record: FakeSandbox) -> None:
        """Wait while ``record`` is paused: its execd is frozen, a request to it waits.

        The kernel still accepts the connection of a frozen container, so a
        request is answered after the resume (or never, if it is deleted
        meanwhile: the caller sees the deletion). A resume and a delete
        set the sandbox's ``thawed`` event.
        """
        thawed = record.extra.get("thawed")
        while (
            isinstance(thawed, asyncio.Event)
            and self.phase(record) in ("Pausing", "Paused", "Resuming")
            and record.state is not SandboxState.DELETED
        ):
            await thawed.wait()

    async def _endpoint(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        sandbox_id = request.match_info["id"]
        record = self._live(sandbox_id)
        if record is None:
            return error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        try:
            port = int(request.match_info["port"])
        except ValueError:
            return error(400, "INVALID_REQUEST", "port must be a number")
        if not 1 <= port <= 65535:
            return error(400, "INVALID_REQUEST", "port out of range")
        proxy = request.query.get("use_server_proxy", "false").lower() == "true"
        headers: dict[str, str] = {}
        if port == EGRESS_PORT:
            headers[EGRESS_AUTH_HEADER] = str(record.extra["egress_token"])
        if proxy:
            endpoint = f"{request.host}/v1/sandboxes/{sandbox_id}/proxy/{port}"
        else:
            # Direct: execd's port, or execd's /proxy/{port} for any other (the Docker
            # runtime's "{host}:{execd host port}/proxy/{port}"), both behind execd's
            # access token; the egress sidecar wants its own.
            endpoint = f"{request.host}/direct/{sandbox_id}/{port}"
            if port != EGRESS_PORT:
                headers[EXECD_TOKEN_HEADER] = record.token
        return web.json_response({"endpoint": endpoint, "headers": headers})

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        record = self._live(request.match_info["id"])
        if record is None:
            return error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        return await self._port(request, record, via_proxy=True)

    async def _direct(self, request: web.Request) -> web.StreamResponse:
        self.direct_api_keys.append(request.headers.get(API_KEY_HEADER))
        record = self._live(request.match_info["id"])
        if record is None:
            # Nothing listens where the sandbox was: what a gateway answers.
            return web.Response(status=502, text="bad gateway")
        return await self._port(request, record, via_proxy=False)

    async def _port(
        self, request: web.Request, record: FakeSandbox, *, via_proxy: bool
    ) -> web.StreamResponse:
        await self.held_until_running(record)
        if record.state is SandboxState.DELETED:
            return web.Response(status=502, text="bad gateway")
        port = int(request.match_info["port"])
        raw_tail = request.match_info.get("tail", "")
        tail = raw_tail.strip("/")
        if port == EGRESS_PORT:
            return await self._egress(request, record, tail)
        if port != EXECD_PORT:
            return await self._user_port(request, record, port, raw_tail, via_proxy=via_proxy)
        booting = int(record.extra.get("execd_boot", 0))
        if booting > 0:
            # The container runs; execd inside it does not listen yet.
            record.extra["execd_boot"] = booting - 1
            return web.Response(status=502, text="execd is not listening yet")
        if not via_proxy and request.headers.get(EXECD_TOKEN_HEADER) != record.token:
            return web.Response(status=401, text="unauthorized")
        return await self._execd(request, record, tail)

    async def _user_port(
        self, request: web.Request, record: FakeSandbox, port: int, tail: str, *, via_proxy: bool
    ) -> web.StreamResponse:
        """execd's ProxyMiddleware (or the server's proxy): on to 127.0.0.1:{port} of the sandbox,
        which for the fake's host-process sandboxes is the host's."""
        if not via_proxy and request.headers.get(EXECD_TOKEN_HEADER) != record.token:
            return web.Response(status=401, text="unauthorized")
        # The server strips its credentials; execd's token stops at execd.
        drop = (API_KEY_HEADER, "authorization", "cookie", EXECD_TOKEN_HEADER)
        return await forward_to_port(request, port, tail, drop=drop)


def _create_problem(body: object) -> str | None:  # noqa: PLR0911 - one return per rule
    """Why a create request is invalid, or None (the spec's required fields)."""
    if not isinstance(body, dict):
        return "the body must be an object"
    image = body.get("image")
    if not isinstance(image, dict) or not isinstance(image.get("uri"), str) or not image["uri"]:
        return "image.uri is required"
    entrypoint = body.get("entrypoint")
    if not isinstance(entrypoint, list) or not entrypoint:
        return "entrypoint is required when image is provided"
    limits = body.get("resourceLimits")
    if not isinstance(limits, dict) or not all(isinstance(v, str) for v in limits.values()):
        return "resourceLimits is required (string values)"
    if not is_string_map(body.get("metadata") or {}):
        return "metadata must map strings to strings"
    policy = body.get("networkPolicy")
    if policy is not None:
        if not isinstance(policy, dict):
            return "networkPolicy must be an object"
        if rules_of(policy.get("egress") or []) is None:
            return "networkPolicy.egress has an invalid rule"
    return None
