"""The fake toolbox's sessions: one long-lived shell per session, commands fed to its stdin.

As the daemon does (``apps/daemon/pkg/toolbox/process/session``): ``POST
/process/session`` starts the session's shell (``409`` if the id is taken);
``POST /process/session/{id}/exec`` writes ``{ CMD; } > LOG 2>&1; echo "$?"
> EXIT`` to that shell's stdin and answers ``202 {"cmdId"}`` with
``runAsync`` (or ``async``), else waits for the exit file and answers the
output and exit code; ``GET .../command/{cmdId}`` reads the exit file
(``exitCode`` absent while it runs); ``GET .../logs`` answers the log (JSON
``{"output", "stdout", "stderr"}`` for an SDK from 0.167.0 on, which sends
``X-Daytona-SDK-Version``; plain text otherwise); ``DELETE`` kills the shell
(not its command's detached children) and forgets the session; ``GET
/process/session`` lists them. Commands of one session run one after the
other, as they do in the daemon's shell.

Limits of the fake: it keeps one combined log (its JSON ``stdout`` is that
log, ``stderr`` is empty), and its sessions' shells are host processes
marked with the sandbox (:mod:`mango.fakes.reaper`), so whatever they start
dies when the sandbox is deleted or stopped. Paths under
``/tmp/.mango-processes`` in a command line are moved into the sandbox's
private temporary directory (a real sandbox's ``/tmp`` is its own).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, kill_marked, mark
from mango_provider_daytona.fake.state import DaytonaState, error
from mango_provider_daytona.fake.toolbox import PROCESSES_PREFIX

__all__ = ["FakeSession", "SessionRoutes"]

_JSON_LOGS_SINCE = (0, 167, 0)


@attrs.define(eq=False)
class FakeSession:
    """One session: its shell, its directory and its commands (id to command line)."""

    id: str
    shell: asyncio.subprocess.Process
    directory: Path
    commands: dict[str, str] = attrs.field(factory=dict)

    @property
    def ended(self) -> bool:
        """The session's shell has ended (killed, or the sandbox went)."""
        return self.shell.returncode is not None

    def exit_code(self, command_id: str) -> int | None:
        """The command's exit code once its exit file is written, else ``None``."""
        try:
            text = (self.directory / command_id / "exit_code").read_text()
        except FileNotFoundError:
            return None
        return int(text.strip()) if text.strip().lstrip("-").isdigit() else None

    def document(self, command_id: str) -> dict[str, Any]:
        """The daemon's ``Command``: ``id``, ``command`` and ``exitCode`` once known."""
        body: dict[str, Any] = {"id": command_id, "command": self.commands[command_id]}
        code = self.exit_code(command_id)
        if code is not None:
            body["exitCode"] = code
        return body


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


class SessionRoutes(DaytonaState):
    """The session handlers; :class:`~mango_provider_daytona.fake.DaytonaFake` routes them."""

    def _sessions(self, record: FakeSandbox) -> dict[str, FakeSession]:
        sessions: dict[str, FakeSession] = record.extra.setdefault("sessions", {})
        return sessions

    def _session_record(self, request: web.Request) -> FakeSandbox | web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "sandbox not found")
        if self.state(record) != "started":
            return error(400, f"sandbox is {self.state(record)}")
        return record

    def _session(self, request: web.Request) -> tuple[FakeSandbox, FakeSession] | web.Response:
        record = self._session_record(request)
        if isinstance(record, web.Response):
            return record
        session = self._sessions(record).get(request.match_info["session"])
        if session is None:
            return error(404, "session not found")
        return record, session

    async def create_session(self, request: web.Request) -> web.Response:
        record = self._session_record(request)
        if isinstance(record, web.Response):
            return record
        try:
            body = await request.json()
        except ValueError:
            return error(400, "invalid request body")
        session_id = body.get("sessionId") if isinstance(body, dict) else None
        if not isinstance(session_id, str) or not session_id:
            return error(400, "invalid request body: sessionId is required")
        sessions = self._sessions(record)
        if session_id in sessions:
            return error(409, "session already exists")
        root = Path(record.local.root)
        tmp = root.parent / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        directory = root.parent / "sessions" / session_id
        directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(root), "TMPDIR": str(tmp), **mark(record.id)}
        shell = await asyncio.create_subprocess_exec(
            "/bin/sh",
            cwd=root,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.shells.append(shell)
        sessions[session_id] = FakeSession(session_id, shell, directory)
        return web.Response(status=201)

    async def list_sessions(self, request: web.Request) -> web.Response:
        record = self._session_record(request)
        if isinstance(record, web.Response):
            return record
        return web.json_response(
            [
                {"sessionId": s.id, "commands": [s.document(c) for c in s.commands]}
                for s in self._sessions(record).values()
            ]
        )

    async def get_session(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        _record, session = found
        commands = [session.document(c) for c in session.commands]
        return web.json_response({"sessionId": session.id, "commands": commands})

    async def delete_session(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        record, session = found
        # The daemon cancels the shell's context: the shell is killed, its children are not.
        if session.shell.returncode is None:
            session.shell.kill()
            await session.shell.wait()
        del self._sessions(record)[session.id]
        return web.Response(status=204)

    async def session_execute(self, request: web.Request) -> web.Response:  # noqa: PLR0911 - the daemon's answers
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        record, session = found
        try:
            body = await request.json()
        except ValueError:
            return error(400, "invalid request body")
        line = body.get("command") if isinstance(body, dict) else None
        if not isinstance(line, str) or not line.strip():
            return error(400, "command cannot be empty")
        run_async = bool(body.get("runAsync") or body.get("async"))
        command_id = str(uuid.uuid4())
        folder = session.directory / command_id
        folder.mkdir()
        session.commands[command_id] = line
        private = str(Path(record.local.root).parent / "tmp" / ".mango-processes")
        text = line.replace(PROCESSES_PREFIX, private)
        log, exit_file = folder / "output.log", folder / "exit_code"
        script = f'{{ {text}\n}} > {log} 2>&1 ; echo "$?" > {exit_file}\n'
        pipe = session.shell.stdin
        if pipe is None or session.shell.returncode is not None:
            return error(400, "failed to write command: the session's shell has ended")
        pipe.write(script.encode())
        await pipe.drain()
        if run_async:
            return web.json_response({"cmdId": command_id}, status=202)
        while (code := session.exit_code(command_id)) is None:
            if session.ended:
                return error(400, "session cancelled")
            await asyncio.sleep(0.05)  # the daemon polls the exit file every 50 ms
        output = log.read_bytes().decode("utf-8", "replace")
        return web.json_response({"cmdId": command_id, "output": output, "exitCode": code})

    async def session_command(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        _record, session = found
        command_id = request.match_info["command"]
        if command_id not in session.commands:
            return error(404, "command not found")
        return web.json_response(session.document(command_id))

    async def session_command_logs(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        _record, session = found
        command_id = request.match_info["command"]
        if command_id not in session.commands:
            return error(404, "command not found")
        try:
            text = (session.directory / command_id / "output.log").read_bytes()
        except FileNotFoundError:
            return error(404, "log file not found")
        output = text.decode("utf-8", "replace")
        version = request.headers.get("X-Daytona-SDK-Version", "")
        if version and _version(version) >= _JSON_LOGS_SINCE:
            return web.json_response({"output": output, "stdout": output, "stderr": ""})
        return web.Response(text=output)

    def end_sessions(self, record: FakeSandbox) -> None:
        """The sandbox stopped or went: its daemon and every process it started die."""
        for session in self._sessions(record).values():
            if session.shell.returncode is None:
                session.shell.kill()
        self._sessions(record).clear()
        kill_marked(record.id)
