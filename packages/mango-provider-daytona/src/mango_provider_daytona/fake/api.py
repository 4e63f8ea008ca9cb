"""The fake's API: the ``/sandbox`` routes, from create to delete, list and last-activity."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from mango.fakes import FakeSandbox, is_string_map
from mango_provider_daytona.fake.state import FAKE_ORGANIZATION, DaytonaState, error

__all__ = ["ApiRoutes"]

_PAGE = 100


class ApiRoutes(DaytonaState):
    """The API's handlers; :class:`~mango_provider_daytona.fake.DaytonaFake` routes them."""

    def document(self, record: FakeSandbox, request: web.Request) -> dict[str, Any]:
        """The Sandbox JSON the API returns for ``record``."""
        extra = record.extra
        return {
            "id": record.id,
            "organizationId": FAKE_ORGANIZATION,
            "name": extra.get("name", record.id),
            "snapshot": extra.get("snapshot"),
            "user": "daytona",
            "env": {},
            "labels": dict(record.metadata),
            "public": bool(extra.get("public", False)),
            "networkBlockAll": bool(extra.get("networkBlockAll", False)),
            "kvm": False,
            "target": extra.get("target", "us"),
            "cpu": extra.get("cpu", 1),
            "gpu": 0,
            "memory": extra.get("memory", 1),
            "disk": extra.get("disk", 3),
            "state": self.state(record),
            "desiredState": "started",
            "autoStopInterval": extra.get("autoStopInterval", 0),
            "autoPauseInterval": extra.get("autoPauseInterval", 0),
            "autoArchiveInterval": extra.get("autoArchiveInterval", 0),
            "autoDeleteInterval": extra.get("autoDeleteInterval", -1),
            "createdAt": record.created_at.isoformat(),
            "updatedAt": datetime.now(UTC).isoformat(),
            "lastActivityAt": extra.get("lastActivityAt"),
            "toolboxProxyUrl": f"{request.scheme}://{request.host}/toolbox",
            "daemonVersion": "fake",
        }

    async def get_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        pending = self._pending_polls.get(record.id, 0)
        if pending > 0:
            self._pending_polls[record.id] = pending - 1
            if pending == 1:
                self.set_state(record.id, "started")
        return web.json_response(self.document(record, request))

    async def create_sandbox(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict):
            return error(400, "invalid body")
        sandbox_id = str(uuid.uuid4())
        name = str(body.get("name") or sandbox_id)
        if self.record(name) is not None:
            return error(409, f"Sandbox with name {name} already exists")
        labels = body.get("labels") or {}
        if not is_string_map(labels):
            return error(400, "labels must map strings to strings")
        for field in ("cpu", "memory", "disk"):
            if field in body and (not isinstance(body[field], int) or body[field] <= 0):
                return error(400, f"{field} must be a positive integer")
        extra = {
            key: body[key]
            for key in (
                "snapshot",
                "public",
                "networkBlockAll",
                "target",
                "cpu",
                "memory",
                "disk",
                "autoStopInterval",
                "autoPauseInterval",
                "autoArchiveInterval",
                "autoDeleteInterval",
                "buildInfo",
            )
            if key in body
        }
        extra["name"] = name
        extra["state"] = "started"
        record = await self._service.sandboxes.create(labels, sandbox_id=sandbox_id, extra=extra)
        self._names[name] = record.id
        return web.json_response(self.document(record, request))

    async def start_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        if self.state(record) != "started":
            if self.start_polls > 0:
                record.extra["state"] = "starting"
                self._pending_polls[record.id] = self.start_polls
            else:
                self.set_state(record.id, "started")
        return web.json_response(self.document(record, request))

    def _transition(self, state: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            record = self.record(request.match_info["id"])
            if record is None:
                return error(404, "Sandbox not found")
            self.set_state(record.id, state)
            return web.json_response(self.document(record, request))

        return handler

    async def delete_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        document = self.document(record, request)
        await self._service.sandboxes.delete(record.id)
        self._names.pop(str(record.extra.get("name")), None)
        document["state"] = "destroying"
        document["desiredState"] = "destroyed"
        return web.json_response(document)

    async def touch_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "Sandbox not found")
        record.extra["lastActivityAt"] = datetime.now(UTC).isoformat()
        return web.Response(status=201)

    async def list_sandboxes(self, request: web.Request) -> web.Response:
        try:
            labels = json.loads(request.query.get("labels") or "{}")
            limit = int(request.query.get("limit") or _PAGE)
            offset = int(request.query.get("cursor") or 0)
        except ValueError:
            return error(400, "invalid query")
        if not isinstance(labels, dict) or limit <= 0:
            return error(400, "invalid query")
        records = self._service.sandboxes.list(labels)
        page = records[offset : offset + limit]
        following = offset + limit if offset + limit < len(records) else None
        return web.json_response(
            {
                "items": [self.document(record, request) for record in page],
                "nextCursor": None if following is None else str(following),
            }
        )
