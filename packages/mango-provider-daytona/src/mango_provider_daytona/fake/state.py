"""The state of one fake Daytona deployment: its sandboxes by id and name, and their states."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from http import HTTPStatus

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, FakeService, SandboxState
from mango.provider import ExecResult

__all__ = ["FAKE_API_KEY", "FAKE_MAX_OUTPUT_BYTES", "FAKE_ORGANIZATION", "DaytonaState", "error"]

FAKE_API_KEY = "fake-daytona-key"
"""The key a standalone fake accepts (``python -m mango_provider_daytona.fake``, or
``python -m mango.fakes mango_provider_daytona.fake:routes``)."""
FAKE_ORGANIZATION = "org-mango-fake"
"""The organization every fake sandbox belongs to."""
FAKE_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
"""The fake daemon's output cap: the daemon buffers everything; this bounds the test host."""


def error(status: int, message: str) -> web.Response:
    """Daytona's error body: ``{"statusCode", "message", "code", "timestamp"}``."""
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
class DaytonaState:
    """The sandboxes of one fake Daytona: by id and by name, with their Daytona states."""

    api_key: str = FAKE_API_KEY
    start_polls: int = 0
    """After a start, how many GETs still report ``starting`` (0: started at once)."""
    legacy_daemon: bool = False
    """Answer bulk downloads as daemons before their typed errors did: file parts without
    ``Content-Length``, errors as ``text/plain`` parts."""
    executions: list[asyncio.Future[ExecResult]] = attrs.field(factory=list, init=False)
    """Every ``/process/execute`` command started, in order (each runs detached from its
    request, as the daemon's does: a cut request does not stop it)."""
    shells: list[asyncio.subprocess.Process] = attrs.field(factory=list, init=False)
    """Every session's shell, for :meth:`reap` when the fake stops."""
    service: FakeService | None = attrs.field(default=None, init=False)
    _names: dict[str, str] = attrs.field(factory=dict, init=False)
    _pending_polls: dict[str, int] = attrs.field(factory=dict, init=False)

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

    async def reap(self) -> None:
        """Kill and wait for every session shell (the fake stops: none outlives it)."""
        for shell in self.shells:
            if shell.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    shell.kill()
            await shell.wait()
        self.shells.clear()

    def end_sessions(self, record: FakeSandbox) -> None:
        """The sandbox stopped: end its sessions and their processes (the sessions' part)."""

    def set_state(self, sandbox_id: str, state: str) -> None:
        """Put a sandbox in ``state`` behind the client's back (``stopped``, ``archived``, ...)."""
        record = self._service.sandboxes.get(sandbox_id)
        record.extra["state"] = state
        if state in ("stopped", "archived"):
            self.end_sessions(record)  # the container stops: every process in it dies
        if state == "started":
            self._service.sandboxes.resume(sandbox_id)
        else:
            self._service.sandboxes.pause(sandbox_id)
