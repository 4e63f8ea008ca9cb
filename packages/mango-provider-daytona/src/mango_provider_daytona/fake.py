"""A fake Daytona (API and toolbox) on the kit's fake-service scaffold.

Protocol-faithful where mango and the official SDK look: the API's
``/sandbox`` routes (get by id or name, create with 409 on a taken name,
start, stop, archive, pause, delete, list by labels with a cursor,
last-activity) and a sandbox's toolbox under ``{toolboxProxyUrl}/{id}``
(``/process/execute`` runs the command text through a shell reading it on
stdin with stdout and stderr merged, as the daemon does, answers 408 when
its timeout kills the process group and a bare 502 when the sandbox is
deleted while the command runs, as the proxies in front of a dead daemon do;
``/files/bulk-upload``, ``/files/bulk-download`` as multipart,
``/files/folder``, ``/files/info`` (following symlinks, like the daemon's
``os.Stat``), ``/user-home-dir``).
The SDK's ``/socket.io`` event channel is not served (404), which the SDK
tolerates by polling.

Every sandbox is a real local process sandbox (:mod:`mango.fakes`):
its "home directory" is the local workspace on this host, so absolute paths
the toolbox receives are host paths. File routes refuse paths outside the
sandbox's home and the wrapper's ``/tmp`` directories (a fake must never
write elsewhere on the test host).

Test hooks: :meth:`DaytonaFake.set_state` (stop, archive or pause behind
mango's back), :attr:`DaytonaFake.start_polls` (how many polls a start takes),
and the service's :class:`~mango.fakes.Faults` and
``sandboxes.delete`` (a sandbox deleted behind mango's back).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, FakeService, SandboxState
from mango.provider import Command, SandboxSpec

__all__ = ["FAKE_API_KEY", "DaytonaFake", "open_fake_daytona", "routes"]

FAKE_API_KEY = "fake-daytona-key"
"""The key the standalone fake accepts (``python -m mango.fakes ...:routes``)."""
FAKE_ORGANIZATION = "org-mango-fake"
_DOWNLOAD_BOUNDARY = "DAYTONA-FILE-BOUNDARY"
_SHELL_EXEC = ("/bin/sh", "-c", "exec /bin/sh 2>&1")
# The wrapper's directories (the fake's sandboxes have no TMPDIR, so they land in /tmp).
_TMP_PREFIXES = ("/tmp/.mango-exec", "/tmp/.mango-stdin")  # noqa: S108
_PAGE = 100


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {
            "statusCode": status,
            "message": message,
            "code": HTTPStatus(status).phrase,
            "timestamp": datetime.now(UTC).isoformat(),
        },
        status=status,
    )


@attrs.define(eq=False)
class DaytonaFake:
    """The state of one fake Daytona deployment and its routes."""

    api_key: str = FAKE_API_KEY
    start_polls: int = 0
    """After a start, how many GETs still report ``starting`` (0: started at once)."""
    service: FakeService | None = attrs.field(default=None, init=False)
    _names: dict[str, str] = attrs.field(factory=dict, init=False)
    _pending_polls: dict[str, int] = attrs.field(factory=dict, init=False)

    # ------------------------------------------------------------ helpers

    @property
    def _service(self) -> FakeService:
        if self.service is None:
            raise RuntimeError("the fake Daytona is not attached to a service")
        return self.service

    def record(self, id_or_name: str) -> FakeSandbox | None:
        """The live sandbox with this id or name (``None`` if it is not there)."""
        sandboxes = self._service.sandboxes
        record = sandboxes.find(id_or_name)
        if record is None and id_or_name in self._names:
            record = sandboxes.find(self._names[id_or_name])
        if record is None or record.state is SandboxState.DELETED:
            return None
        return record

    def state(self, record: FakeSandbox) -> str:
        """The Daytona state of ``record``."""
        if record.state is SandboxState.DELETED:
            return "destroyed"
        return str(record.extra.get("state", "started"))

    def set_state(self, sandbox_id: str, state: str) -> None:
        """Put a sandbox in ``state`` behind the client's back (``stopped``, ``archived``, ...)."""
        record = self._service.sandboxes.get(sandbox_id)
        record.extra["state"] = state
        if state == "started":
            self._service.sandboxes.resume(sandbox_id)
        else:
            self._service.sandboxes.pause(sandbox_id)

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

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    # ------------------------------------------------------------ API

    async def get_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return _error(404, "Sandbox not found")
        pending = self._pending_polls.get(record.id, 0)
        if pending > 0:
            self._pending_polls[record.id] = pending - 1
            if pending == 1:
                self.set_state(record.id, "started")
        return web.json_response(self.document(record, request))

    async def create_sandbox(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict):
            return _error(400, "invalid body")
        sandbox_id = str(uuid.uuid4())
        name = str(body.get("name") or sandbox_id)
        if self.record(name) is not None:
            return _error(409, f"Sandbox with name {name} already exists")
        labels = body.get("labels") or {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            return _error(400, "labels must map strings to strings")
        for field in ("cpu", "memory", "disk"):
            if field in body and (not isinstance(body[field], int) or body[field] <= 0):
                return _error(400, f"{field} must be a positive integer")
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
            return _error(404, "Sandbox not found")
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
                return _error(404, "Sandbox not found")
            self.set_state(record.id, state)
            return web.json_response(self.document(record, request))

        return handler

    async def delete_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return _error(404, "Sandbox not found")
        document = self.document(record, request)
        await self._service.sandboxes.delete(record.id)
        self._names.pop(str(record.extra.get("name")), None)
        document["state"] = "destroying"
        document["desiredState"] = "destroyed"
        return web.json_response(document)

    async def touch_sandbox(self, request: web.Request) -> web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return _error(404, "Sandbox not found")
        record.extra["lastActivityAt"] = datetime.now(UTC).isoformat()
        return web.Response(status=201)

    async def list_sandboxes(self, request: web.Request) -> web.Response:
        try:
            labels = json.loads(request.query.get("labels") or "{}")
            limit = int(request.query.get("limit") or _PAGE)
            offset = int(request.query.get("cursor") or 0)
        except ValueError:
            return _error(400, "invalid query")
        if not isinstance(labels, dict) or limit <= 0:
            return _error(400, "invalid query")
        records = self._service.sandboxes.list(labels)
        page = records[offset : offset + limit]
        following = offset + limit if offset + limit < len(records) else None
        return web.json_response(
            {
                "items": [self.document(record, request) for record in page],
                "nextCursor": None if following is None else str(following),
            }
        )

    # ------------------------------------------------------------ toolbox

    def _running(self, request: web.Request) -> FakeSandbox | web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return _error(404, "sandbox not found")
        if self.state(record) != "started":
            return _error(400, f"sandbox is {self.state(record)}")
        return record

    def _allowed(self, record: FakeSandbox, path: str) -> Path | None:
        if not path:
            return None
        root = os.path.normpath(record.local.root)
        # The daemon resolves a relative path against its working directory, the home.
        target = os.path.normpath(Path(root, path))
        if target == root or target.startswith(root + "/"):
            return Path(target)
        if any(target == p or target.startswith(p + "/") for p in _TMP_PREFIXES):
            return Path(target)
        return None

    async def home_dir(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        return web.json_response({"dir": record.local.root})

    async def execute(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        body = await request.json()
        line = body.get("command") if isinstance(body, dict) else None
        if not isinstance(line, str) or not line.strip():
            return _error(400, "command cannot be empty or whitespace-only")
        timeout = body.get("timeout")
        command = Command(
            argv=_SHELL_EXEC,
            stdin=line.encode(),
            timeout=float(timeout) if isinstance(timeout, int) and timeout > 0 else None,
        )
        result = await record.local.exec(command)
        if result.timed_out:
            return _error(408, "command execution timeout")
        if result.cancelled:
            # Deleted while the command ran: the daemon died with the sandbox,
            # so the runner's reverse proxy answers Go's bare 502 (no body),
            # which Daytona's proxy passes on. Never a 404: that is the answer
            # to a request that arrives after the sandbox is gone.
            return web.Response(status=HTTPStatus.BAD_GATEWAY)
        # Go's string(output) in a JSON reply: invalid UTF-8 becomes U+FFFD.
        return web.json_response(
            {"exitCode": result.exit_code, "result": result.stdout.decode("utf-8", "replace")}
        )

    async def make_folder(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        target = self._allowed(record, request.query.get("path", ""))
        if target is None:
            return _error(403, "the fake refuses this path")
        mode = int(request.query.get("mode") or "0755", 8)
        try:
            target.mkdir(mode=mode, parents=True, exist_ok=True)
        except OSError as exc:
            return _error(400, str(exc))
        return web.Response(status=201)

    async def file_info(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        target = self._allowed(record, request.query.get("path", ""))
        if target is None:
            return _error(403, "the fake refuses this path")
        try:
            info = target.stat()  # follows symlinks, as the daemon's os.Stat does
        except FileNotFoundError:
            return _error(404, "file not found")
        return web.json_response(
            {
                "name": target.name,
                "size": info.st_size,
                "mode": oct(info.st_mode),
                "modTime": str(info.st_mtime),
                "isDir": target.is_dir(),
                "owner": str(info.st_uid),
                "group": str(info.st_gid),
                "permissions": f"{info.st_mode & 0o7777:04o}",
            }
        )

    async def delete_file(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        target = self._allowed(record, request.query.get("path", ""))
        if target is None:
            return _error(403, "the fake refuses this path")
        try:
            target.unlink()
        except FileNotFoundError:
            return _error(404, "file not found")
        except OSError as exc:
            return _error(400, str(exc))
        return web.Response(status=204)

    async def upload(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        reader = await request.multipart()
        destinations: dict[str, str] = {}
        files: list[dict[str, Any]] = []
        errors: list[str] = []
        async for part in reader:
            name = getattr(part, "name", None) or ""
            index = name.removeprefix("files[").removesuffix("].path").removesuffix("].file")
            if name.endswith(".path"):
                destinations[index] = (await part.text()).strip()  # type: ignore[union-attr]
                continue
            if not name.endswith(".file"):
                continue
            destination = destinations.get(index)
            target = None if destination is None else self._allowed(record, destination)
            if target is None:
                errors.append(f"file[{index}]: missing or refused path")
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                size = 0
                with target.open("wb") as handle:  # follows symlinks, as os.Create does
                    while chunk := await part.read_chunk():  # type: ignore[union-attr]
                        handle.write(chunk)
                        size += len(chunk)
            except OSError as exc:
                errors.append(f"{destination}: {exc}")
                continue
            files.append({"path": destination, "bytes": size})
        if errors:
            return web.json_response({"errors": errors, "files": files}, status=400)
        return web.json_response({"files": files})

    async def download(self, request: web.Request) -> web.StreamResponse:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        body = await request.json()
        paths = body.get("paths") if isinstance(body, dict) else None
        if not isinstance(paths, list) or not paths:
            return web.json_response(
                {"error": 'request body must be {"paths": [ ... ]} and non-empty'}, status=400
            )
        response = web.StreamResponse(
            headers={"Content-Type": f"multipart/form-data; boundary={_DOWNLOAD_BOUNDARY}"}
        )
        await response.prepare(request)
        for path in paths:
            await self._write_part(response, record, str(path))
        await response.write(f"\r\n--{_DOWNLOAD_BOUNDARY}--\r\n".encode())
        await response.write_eof()
        return response

    async def _write_part(
        self, response: web.StreamResponse, record: FakeSandbox, path: str
    ) -> None:
        target = self._allowed(record, path)
        status = None
        if target is None:
            status, message = 403, f"permission denied: {path}"
        elif not target.exists():
            status, message = 404, f"file not found: {path}"
        elif target.is_dir():
            status, message = 400, f"invalid file path: path points to a directory: {path}"
        quoted = path.replace('"', '\\"')
        if status is not None or target is None:
            payload = json.dumps(
                {"statusCode": status, "message": message, "code": "FILE_NOT_FOUND", "path": path}
            ).encode()
            await response.write(
                (
                    f"\r\n--{_DOWNLOAD_BOUNDARY}\r\n"
                    f'Content-Disposition: form-data; name="error"; filename="{quoted}"\r\n'
                    "Content-Type: application/json; charset=utf-8\r\n\r\n"
                ).encode()
                + payload
            )
            return
        with target.open("rb") as handle:  # follows symlinks, as os.Open does
            size = os.fstat(handle.fileno()).st_size
            await response.write(
                (
                    f"\r\n--{_DOWNLOAD_BOUNDARY}\r\n"
                    f'Content-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                    "Content-Type: application/octet-stream\r\n"
                    f"Content-Length: {size}\r\n\r\n"
                ).encode()
            )
            while chunk := handle.read(256 * 1024):
                await response.write(chunk)

    # ------------------------------------------------------------ routes

    def routes(self, service: FakeService) -> Iterable[web.RouteDef]:
        """The fake's routes on ``service`` (the scaffold's ``RoutesFactory``)."""
        self.service = service

        def guarded(handler: Any) -> Any:
            async def wrapper(request: web.Request) -> web.StreamResponse:
                if not self._authorized(request):
                    return _error(401, "Unauthorized")
                response: web.StreamResponse = await handler(request)
                return response

            return wrapper

        toolbox = "/toolbox/{id}"
        return [
            web.get("/sandbox", guarded(self.list_sandboxes)),
            web.post("/sandbox", guarded(self.create_sandbox)),
            web.get("/sandbox/{id}", guarded(self.get_sandbox)),
            web.delete("/sandbox/{id}", guarded(self.delete_sandbox)),
            web.post("/sandbox/{id}/start", guarded(self.start_sandbox)),
            web.post("/sandbox/{id}/stop", guarded(self._transition("stopped"))),
            web.post("/sandbox/{id}/archive", guarded(self._transition("archived"))),
            web.post("/sandbox/{id}/pause", guarded(self._transition("paused"))),
            web.post("/sandbox/{id}/last-activity", guarded(self.touch_sandbox)),
            web.get(f"{toolbox}/user-home-dir", guarded(self.home_dir)),
            web.get(f"{toolbox}/project-dir", guarded(self.home_dir)),
            web.get(f"{toolbox}/work-dir", guarded(self.home_dir)),
            web.post(f"{toolbox}/process/execute", guarded(self.execute)),
            web.post(f"{toolbox}/files/folder", guarded(self.make_folder)),
            web.get(f"{toolbox}/files/info", guarded(self.file_info)),
            web.delete(f"{toolbox}/files", guarded(self.delete_file)),
            web.post(f"{toolbox}/files/bulk-upload", guarded(self.upload)),
            web.post(f"{toolbox}/files/bulk-download", guarded(self.download)),
        ]


FAKE_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
"""The fake daemon's output cap: the daemon buffers everything; this bounds the test host."""


def routes(service: FakeService) -> Iterable[web.RouteDef]:
    """A standalone fake's routes, accepting :data:`FAKE_API_KEY`."""
    return DaytonaFake().routes(service)


@asynccontextmanager
async def open_fake_daytona(
    scratch_dir: Path, *, api_key: str = FAKE_API_KEY
) -> AsyncIterator[tuple[FakeService, DaytonaFake]]:
    """Serve a fake Daytona on 127.0.0.1 with sandboxes under ``scratch_dir``."""
    fake = DaytonaFake(api_key=api_key)
    service = FakeService(
        Path(scratch_dir),
        fake.routes,
        name="daytona",
        spec=SandboxSpec(),
        max_output_bytes=FAKE_MAX_OUTPUT_BYTES,
    )
    async with service:
        yield service, fake


def main() -> None:
    """``python -m mango_provider_daytona.fake [SCRATCH]``: serve a fake Daytona until SIGTERM.

    Prints its URL on the first line; the key is :data:`FAKE_API_KEY`.
    """
    import asyncio
    import sys
    import tempfile

    from mango.fakes import serve

    with tempfile.TemporaryDirectory(prefix="mango-daytona-fake-") as default_scratch:
        scratch = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(default_scratch)
        fake = DaytonaFake()
        service = FakeService(
            scratch, fake.routes, name="daytona", max_output_bytes=FAKE_MAX_OUTPUT_BYTES
        )
        asyncio.run(serve(service))


if __name__ == "__main__":
    main()
