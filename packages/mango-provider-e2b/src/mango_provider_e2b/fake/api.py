"""The fake control plane: create, list, get, kill, connect, timeout, pause, resume, health."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, SandboxState, is_string_map, rfc3339
from mango_provider_e2b.fake.common import PROCESSES, Routes, api_error, as_object, replying
from mango_provider_e2b.fake.config import CUBE_MODE

__all__ = ["ControlPlane"]


@attrs.define(eq=False)
class ControlPlane(Routes):
    """The control plane's routes (the API key's side of the service)."""

    def routes(self) -> list[web.AbstractRouteDef]:
        """The control plane's routes, in registration order."""
        wrap = replying
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
        ]

    def _record(self, request: web.Request) -> FakeSandbox:
        sandbox_id = request.match_info["id"]
        record = self.service.sandboxes.live(sandbox_id)
        if record is None:
            raise api_error(404, f"sandbox {sandbox_id!r} not found")
        return record

    def _sandbox_json(self, record: FakeSandbox) -> dict[str, Any]:
        body: dict[str, Any] = {
            "sandboxID": record.id,
            "templateID": record.extra.get("template", "base"),
            "clientID": "fake",
            "envdVersion": self.config.reported_envd_version,
            "envdAccessToken": record.token,
        }
        if self.config.mode == CUBE_MODE:
            body["domain"] = self.config.domain
        return body

    def _listed_json(self, record: FakeSandbox) -> dict[str, Any]:
        end_at = record.extra.get("end_at") or record.created_at
        return {
            **{k: v for k, v in self._sandbox_json(record).items() if k != "envdAccessToken"},
            "startedAt": rfc3339(record.created_at),
            "endAt": rfc3339(end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": record.state.value,
            "metadata": record.metadata,
        }

    async def create(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        body = await self.json_body(request)
        template = body.get("templateID")
        if not isinstance(template, str) or not template:
            raise api_error(400, "templateID is required")
        if template.startswith("missing"):
            raise api_error(404, f"template {template!r} not found")
        metadata = body.get("metadata") or {}
        if not is_string_map(metadata):
            raise api_error(400, "metadata must map strings to strings")
        timeout = body.get("timeout", self.config.default_timeout)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise api_error(400, "timeout must be a positive whole number of seconds")
        cube = self.config.mode == CUBE_MODE
        # Both vendors read the snake-case key only (E2B's API; CubeAPI's NewSandbox).
        internet = body.get("allow_internet_access")
        if cube:
            # CubeAPI parses autoPause/autoResume/secure and acts on none of them, ignores
            # autoPauseMemory and lifecycle, and CubeMaster keeps no lifetime: never expires.
            auto_pause, pause_memory = False, True
        else:
            lifecycle = as_object(body.get("lifecycle"))
            auto_pause = bool(body.get("autoPause")) or lifecycle.get("onTimeout") == "pause"
            pause_memory = body.get("autoPauseMemory", True) is not False
            if not pause_memory and not auto_pause:
                raise api_error(400, "autoPauseMemory=false only applies when autoPause is true.")
        record = await self.service.sandboxes.create(
            metadata,
            extra={
                "template": template,
                "auto_pause": auto_pause,
                "pause_memory": pause_memory,
                "internet": internet is not False,
                "request": body,
                "node": len(self.service.sandboxes.list(include_deleted=True))
                % max(1, self.config.cube_nodes),
                "cold_boots": 0,
                PROCESSES: {},
            },
        )
        if not cube:
            self.service.arm_timeout(record, timeout)
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
        self.authenticate(request)
        records = self._filtered(request, {SandboxState.RUNNING.value})
        return web.json_response([self._listed_json(record) for record in records])

    async def list_v2(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        records = self._filtered(request, {SandboxState.RUNNING.value, SandboxState.PAUSED.value})
        try:
            limit = int(request.query.get("limit", str(self.config.page_size)))
        except ValueError:
            raise api_error(400, "limit must be a number") from None
        if self.config.mode == CUBE_MODE:
            # CubeMaster lists the sandboxes of the first `limit` nodes; no paging at all.
            nodes = max(1, limit)
            listed = [r for r in records if r.extra.get("node", 0) < nodes]
            return web.json_response([self._listed_json(r) for r in listed])
        limit = max(1, min(limit, self.config.page_size))
        start = 0
        token = request.query.get("nextToken", "")
        if token:
            ids = [record.id for record in records]
            if token not in ids:
                raise api_error(400, "invalid nextToken")
            start = ids.index(token)
        page = records[start : start + limit]
        headers = {}
        if start + limit < len(records):
            headers["X-Next-Token"] = records[start + limit].id
        return web.json_response([self._listed_json(r) for r in page], headers=headers)

    async def get(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        record = self._record(request)
        return web.json_response(
            {
                **self._listed_json(record),
                "envdAccessToken": record.token,
                "domain": self.config.domain,
            }
        )

    async def kill(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        record = self._record(request)
        await self.service.delete_sandbox(record.id)
        return web.Response(status=204)

    async def connect(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        record = self._record(request)
        body = await self.json_body(request)
        timeout = body.get("timeout")
        resumed = record.state is SandboxState.PAUSED
        if resumed:
            self.service.resume_sandbox(record.id)
        if self.config.mode == CUBE_MODE:
            pass  # no lifetime to arm
        elif isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
            end_at = record.extra.get("end_at")
            remaining = (end_at - datetime.now(UTC)).total_seconds() if end_at else 0.0
            # connect never shortens a running sandbox's life
            if resumed or timeout > remaining:
                self.service.arm_timeout(record, timeout)
        elif resumed:
            self.service.arm_timeout(record, self.config.default_timeout)
        return web.json_response(self._sandbox_json(record), status=201 if resumed else 200)

    async def set_timeout(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        if self.config.mode == CUBE_MODE:
            # CubeAPI forwards to CubeMaster's /cube/sandbox/timeout, a route CubeMaster does
            # not have (ret_code -1, "Not Found"), which CubeAPI turns into an internal error.
            raise api_error(500, "internal error: CubeMaster: Not Found")
        record = self._record(request)
        timeout = (await self.json_body(request)).get("timeout")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise api_error(400, "timeout must be a positive whole number of seconds")
        if record.state is not SandboxState.RUNNING:
            # e2b-dev/infra: KeepAliveFor looks at running sandboxes only; a paused one is
            # not in that store, so the answer is the same 404 as for a gone one.
            raise api_error(404, f"sandbox {record.id!r} not found")
        self.service.arm_timeout(record, timeout)
        return web.Response(status=204)

    async def pause(self, request: web.Request) -> web.Response:
        """``POST /sandboxes/{id}/pause`` ``{"memory"?: bool}``: 204; 409 if paused; 404 gone.

        The VM stops: its processes are frozen (memory kept, the default) or
        die (``memory: false``, a filesystem-only snapshot), and every envd
        stream of the sandbox is cut. CubeAPI answers the same codes.
        """
        self.authenticate(request)
        record = self._record(request)
        memory = (await self.json_body(request)).get("memory", True)
        if not isinstance(memory, bool):
            raise api_error(400, "memory must be a boolean")
        if record.state is SandboxState.PAUSED:
            raise api_error(409, "sandbox is already paused")
        self.service.pause_sandbox(record.id, memory=memory)
        return web.Response(status=204)

    async def resume(self, request: web.Request) -> web.Response:
        self.authenticate(request)
        record = self._record(request)
        if record.state is SandboxState.RUNNING:
            raise api_error(409, "sandbox is already running")
        self.service.resume_sandbox(record.id)
        self.service.arm_timeout(record, self.config.default_timeout)
        return web.json_response(self._sandbox_json(record), status=201)

    async def health(self, request: web.Request) -> web.Response:
        if self.envd_id(request) is not None:
            self.envd_record(request)
            return web.Response(status=204)
        return web.json_response({"status": "ok", "sandboxes": len(self.service.sandboxes.list())})
