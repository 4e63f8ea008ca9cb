"""The fake execd's background commands, as ``runBackgroundCommand`` runs them.

execd (``components/execd/pkg/runtime/command.go``) starts ``shell -c LINE``
on its own context (not the request's) as a process-group leader
(``Setpgid``), stdin ``/dev/null``, stdout and stderr into one file; its
status (``GET /command/status/{id}``) says ``running``, the exit code (Go's
``ExitCode()``: -1 for a signal) and the times; its log (``GET
/command/{id}/logs?cursor=``) is the file from byte ``cursor`` to its end,
with the end in ``EXECD-COMMANDS-TAIL-CURSOR`` (the spec calls the cursor a
line index; the sources seek bytes); an interrupt sends SIGTERM, then SIGKILL,
to the group. A finished command's group is killed too (execd's
``cancel()``). The fake marks each one with its sandbox
(:func:`mango.fakes.mark`), so it dies with the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, mark, rfc3339
from mango.provider import Command
from mango_provider_opensandbox.fake.common import error

__all__ = ["BackgroundCommand", "BackgroundRoutes"]


@attrs.define(eq=False)
class BackgroundCommand:
    """One background command as execd keeps it: its process, combined output file, status.

    Started as execd starts it: ``shell -c LINE`` in its own process group
    (``Setpgid``), stdin ``/dev/null``, stdout and stderr into one file, the
    fake sandbox's mark in its environment (so it dies with the sandbox).
    An interrupt is SIGTERM, then SIGKILL, to the group.
    """

    id: str
    sandbox: str
    content: str
    process: asyncio.subprocess.Process
    log: Path
    started_at: datetime
    exit_code: int | None = None
    error: str = ""
    finished_at: datetime | None = None
    _waiter: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        command_id: str,
        record: FakeSandbox,
        command: Command,
        *,
        log: Path,
        env: dict[str, str],
    ) -> BackgroundCommand:
        """Start ``command`` (the fake's ``shell -c LINE``) detached."""
        workspace = Path(record.local.root)
        with log.open("wb") as output:
            process = await asyncio.create_subprocess_exec(
                *command.argv,
                cwd=workspace / command.cwd if command.cwd else workspace,
                env={**env, **mark(record.id)},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                process_group=0,
            )
        made = cls(command_id, record.id, command.argv[-1], process, log, datetime.now(UTC))
        made._waiter = asyncio.ensure_future(made._wait())
        return made

    async def _wait(self) -> None:
        code = await self.process.wait()
        # Go's ExitCode(): -1 for a signal; the error text is exec's.
        self.exit_code = code if code >= 0 else -1
        self.error = "" if code == 0 else (f"exit status {code}" if code > 0 else "signal: killed")
        self.finished_at = datetime.now(UTC)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # execd's cancel(): the group goes

    @property
    def running(self) -> bool:
        """Still running (execd's ``running``)."""
        return self.finished_at is None

    def interrupt(self) -> None:
        """SIGTERM to the group, then SIGKILL (execd's ``killPid``)."""
        for number in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, number)

    def status(self) -> dict[str, Any]:
        """execd's ``CommandStatusResponse``."""
        body: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "running": self.running,
            "started_at": rfc3339(self.started_at),
        }
        if self.exit_code is not None:
            body["exit_code"] = self.exit_code
        if self.error:
            body["error"] = self.error
        if self.finished_at is not None:
            body["finished_at"] = rfc3339(self.finished_at)
        return body


class BackgroundRoutes:
    """The status and log routes of background commands (mixed into execd's routes)."""

    _background: dict[str, BackgroundCommand]

    def _background_route(self, tail: str) -> Callable[[web.Request, FakeSandbox], Any] | None:
        parts = tail.split("/")
        if len(parts) == 3 and parts[:2] == ["command", "status"]:
            command_id = parts[2]
            return lambda request, record: self._status(request, record, command_id)
        if len(parts) == 3 and parts[0] == "command" and parts[2] == "logs":
            command_id = parts[1]
            return lambda request, record: self._logs(request, record, command_id)
        return None

    async def _status(
        self, _request: web.Request, record: FakeSandbox, command_id: str
    ) -> web.Response:
        background = self._background.get(command_id)
        if background is None or background.sandbox != record.id:
            return error(404, "INVALID_REQUEST", f"command not found: {command_id}")
        return web.json_response(background.status())

    async def _logs(
        self, request: web.Request, record: FakeSandbox, command_id: str
    ) -> web.Response:
        background = self._background.get(command_id)
        if background is None or background.sandbox != record.id:
            return error(400, "INVALID_REQUEST", f"command not found: {command_id}")
        cursor_text = request.query.get("cursor", "0")
        cursor = int(cursor_text) if cursor_text.isdigit() else 0
        # execd seeks the combined output file to the cursor (bytes) and reads to its end.
        with background.log.open("rb") as handle:
            handle.seek(cursor)
            data = handle.read()
            end = handle.tell()
        return web.Response(
            body=data,
            content_type="text/plain",
            headers={"EXECD-COMMANDS-TAIL-CURSOR": str(end)},
        )
