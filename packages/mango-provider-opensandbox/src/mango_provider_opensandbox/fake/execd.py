"""The fake's execd: command event streams, files, directories."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import re
import secrets
import shutil
import stat
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from mango.fakes import FakeSandbox, FakeService, cut_connection, rfc3339
from mango.provider import Command, ExecResult, OutputChunk, SandboxNotRunning
from mango_provider_opensandbox.fake.background import BackgroundCommand, BackgroundRoutes
from mango_provider_opensandbox.fake.common import error, now_ms
from mango_provider_opensandbox.layout import ROOT

__all__ = ["ExecdRoutes", "LineSplitter"]

_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
_TERMINATOR = re.compile(rb"[\r\n]")
_REWRITE = re.compile(r"(?<![\w./-])(/workspace|/var/lib/mango)(?=[/\s'\";|&)]|\Z)")


class LineSplitter:
    """execd's tailer: one text per line, terminator stripped; a blank line is ``"\\n"``.

    ``\\r``, ``\\n`` and ``\\r\\n`` all end a line; bytes that are not UTF-8
    become U+FFFD (as Go's JSON encoder does).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._cr = False

    def feed(self, data: bytes) -> list[str]:
        """The complete lines in ``data`` (what remains waits for its terminator)."""
        lines: list[str] = []
        start = 0
        for match in _TERMINATOR.finditer(data):
            segment = data[start : match.start()]
            if segment:
                self._buffer += segment
                self._cr = False
            byte = data[match.start()]
            if self._buffer:
                lines.append(self._buffer.decode("utf-8", "replace"))
                self._buffer.clear()
            elif not (byte == 0x0A and self._cr):
                lines.append("\n")
            self._cr = byte == 0x0D
            start = match.end()
        rest = data[start:]
        if rest:
            self._buffer += rest
            self._cr = False
        return lines

    def flush(self) -> list[str]:
        """The last, unterminated line (at the end of the command)."""
        if not self._buffer:
            return []
        text = self._buffer.decode("utf-8", "replace")
        self._buffer.clear()
        return [text]


class ExecdRoutes(BackgroundRoutes):
    """execd's routes; mixed into the fake server, which provides the attributes below."""

    service: FakeService
    grace_seconds: float
    ping_seconds: float
    shell: str
    _commands: dict[str, asyncio.Future[Any]]
    _background: dict[str, BackgroundCommand]
    _command_env: Callable[[FakeSandbox], dict[str, str]]
    held_until_running: Callable[[FakeSandbox], Awaitable[None]]

    async def _execd(
        self, request: web.Request, record: FakeSandbox, tail: str
    ) -> web.StreamResponse:
        handlers: dict[tuple[str, str], Callable[[web.Request, FakeSandbox], Any]] = {
            ("GET", "ping"): self._ping,
            ("POST", "command"): self._command,
            ("DELETE", "command"): self._interrupt,
            ("GET", "files/info"): self._info,
            ("DELETE", "files"): self._remove_files,
            ("POST", "files/upload"): self._upload,
            ("GET", "files/download"): self._download,
            ("POST", "directories"): self._make_dirs,
            ("DELETE", "directories"): self._remove_dirs,
            ("GET", "directories/list"): self._list_directory,
            ("POST", "files/mv"): self._rename_files,
        }
        handler = handlers.get((request.method, tail))
        if handler is None and request.method == "GET":
            handler = self._background_route(tail)
        if handler is None:
            return web.Response(status=404, text="404 page not found")
        response: web.StreamResponse = await handler(request, record)
        return response

    async def _ping(self, _request: web.Request, _record: FakeSandbox) -> web.Response:
        return web.Response(status=200)

    def _host_path(self, record: FakeSandbox, path: str) -> Path:
        if not path.startswith("/"):
            raise web.HTTPBadRequest(text=f"path {path!r} is not absolute")
        clean = os.path.normpath(path)
        workspace = Path(record.local.root)
        if clean == ROOT:
            return workspace
        if clean.startswith(ROOT + "/"):
            return workspace / clean[len(ROOT) + 1 :]
        return workspace.parent / "fsroot" / clean.lstrip("/")

    @staticmethod
    def _file_info(path: str, info: os.stat_result) -> dict[str, Any]:
        """execd's ``buildFileInfo`` of an ``lstat`` (``mode``: the octal digits as decimal)."""
        if stat.S_ISLNK(info.st_mode):
            kind = "symlink"
        elif stat.S_ISDIR(info.st_mode):
            kind = "directory"
        elif stat.S_ISREG(info.st_mode):
            kind = "file"
        else:
            kind = "other"
        moment = rfc3339(datetime.fromtimestamp(info.st_mtime, UTC))
        return {
            "path": path,
            "type": kind,
            "size": info.st_size,
            "modified_at": moment,
            "created_at": moment,
            "owner": str(info.st_uid),
            "group": str(info.st_gid),
            "mode": int(f"{stat.S_IMODE(info.st_mode) & 0o777:o}"),
        }

    async def _info(self, request: web.Request, record: FakeSandbox) -> web.Response:
        answer: dict[str, Any] = {}
        for path in request.query.getall("path", []):
            try:
                info = self._host_path(record, path).lstat()
            except FileNotFoundError:
                return error(404, "FILE_NOT_FOUND", f"file not found. {path}")
            except OSError as exc:
                return error(500, "RUNTIME_ERROR", f"error accessing file: {exc}")
            answer[path] = self._file_info(path, info)
        return web.json_response(answer)

    async def _remove_files(self, request: web.Request, record: FakeSandbox) -> web.Response:
        """execd's ``DeleteFile``: ``os.Stat`` first (it follows a link), then ``os.Remove``.

        A missing path, or a dangling link (its ``Stat`` fails), is success and
        stays; a directory, or a link to one, is refused.
        """
        for path in request.query.getall("path", []):
            target = self._host_path(record, path)
            if not target.exists():
                continue
            if target.is_dir():
                return error(
                    500,
                    "RUNTIME_ERROR",
                    f"error removing file {path}. path is a directory: {path}",
                )
            try:
                target.unlink()
            except OSError as exc:
                return error(500, "RUNTIME_ERROR", f"error removing file {path}. {exc}")
        return web.Response(status=200)

    async def _remove_dirs(self, request: web.Request, record: FakeSandbox) -> web.Response:
        """execd's ``RemoveDirs``: ``os.RemoveAll`` of each path (a link itself, not its target)."""
        for path in request.query.getall("path", []):
            target = self._host_path(record, path)
            try:
                if target.is_dir() and not target.is_symlink():
                    await asyncio.to_thread(shutil.rmtree, target)
                else:
                    target.unlink()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                return error(500, "RUNTIME_ERROR", f"error removing directory {path}. {exc}")
        return web.Response(status=200)

    async def _rename_files(self, request: web.Request, record: FakeSandbox) -> web.Response:
        """execd's ``RenameFiles``: each ``{src, dest}`` in turn, the first failure answered."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, list):
            return error(
                400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format."
            )
        for item in body:
            failed = self._rename_one(record, item if isinstance(item, dict) else {})
            if failed is not None:
                return failed
        return web.Response(status=200)

    def _rename_one(self, record: FakeSandbox, item: dict[str, Any]) -> web.Response | None:
        """execd's ``RenameFile``: ``os.Stat`` of the source (it follows a link: a dangling
        one is "not found"), the destination's parents made, an existing destination refused
        (through ``os.Stat`` too), then ``os.Rename``."""
        source = self._host_path(record, str(item.get("src") or ""))
        destination = self._host_path(record, str(item.get("dest") or ""))
        if not source.exists():
            return error(
                404,
                "FILE_NOT_FOUND",
                f"file not found. source path not found: {item.get('src')}: "
                "no such file or directory",
            )
        problem = None
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.exists():
                problem = f"destination path already exists: {item.get('dest')}"
            else:
                source.rename(destination)
        except OSError as exc:
            problem = f"failed to rename file: {exc}"
        if problem is not None:
            return error(500, "RUNTIME_ERROR", f"error accessing file: {problem}")
        return None

    def _listable(self, record: FakeSandbox, path: str) -> tuple[Path, str] | web.Response:
        """The directory ``/directories/list`` may walk, or execd's refusal (``lstat`` first)."""
        target = self._host_path(record, path)
        clean = posixpath.normpath(path)
        try:
            info = target.lstat()
        except FileNotFoundError as exc:
            return error(404, "FILE_NOT_FOUND", f"file not found. {exc}")
        except OSError as exc:
            return error(500, "RUNTIME_ERROR", f"error accessing file: {exc}")
        if stat.S_ISLNK(info.st_mode):
            return error(
                400,
                "INVALID_REQUEST_BODY",
                f"path is a symbolic link, refusing to traverse: {clean}",
            )
        if not stat.S_ISDIR(info.st_mode):
            return error(400, "INVALID_REQUEST_BODY", f"path is not a directory: {clean}")
        return target, clean

    async def _list_directory(self, request: web.Request, record: FakeSandbox) -> web.Response:
        """execd's ``ListDirectory``: each directory in name order, ``depth`` levels, never
        into a link; the whole walk answered as one JSON array."""
        path = request.query.get("path", "")
        if not path:
            return error(400, "MISSING_QUERY", "missing query parameter 'path'")
        raw = request.query.get("depth", "")
        depth = int(raw) if raw.isdigit() else (1 if not raw else -1)
        if depth < 0:
            return error(400, "INVALID_REQUEST_BODY", f"invalid query parameter 'depth': {raw}")
        listable = self._listable(record, path)
        if isinstance(listable, web.Response):
            return listable
        target, clean = listable
        entries: list[dict[str, Any]] = []

        def walk(host: Path, shown: str, level: int) -> None:
            for child in sorted(host.iterdir(), key=lambda child: child.name):
                child_info = child.lstat()
                child_path = f"{shown.rstrip('/')}/{child.name}"
                entries.append(self._file_info(child_path, child_info))
                if stat.S_ISDIR(child_info.st_mode) and level + 1 < depth:
                    walk(child, child_path, level + 1)

        if depth:
            try:
                await asyncio.to_thread(walk, target, clean, 0)
            except OSError as exc:
                return error(500, "RUNTIME_ERROR", f"error listing directory {clean}. {exc}")
        return web.json_response(entries)

    async def _make_dirs(self, request: web.Request, record: FakeSandbox) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict):
            return error(400, "INVALID_REQUEST_BODY", "expected an object of paths")
        for path, permission in body.items():
            target = self._host_path(record, path)
            try:
                target.mkdir(parents=True, exist_ok=True)
                mode = int((permission or {}).get("mode") or 0)
                if mode:
                    target.chmod(int(str(mode), 8))
            except OSError as exc:
                return error(500, "RUNTIME_ERROR", f"error creating {path}: {exc}")
        return web.Response(status=200)

    async def _upload(self, request: web.Request, record: FakeSandbox) -> web.Response:
        reader = await request.multipart()
        metadata: dict[str, Any] | None = None
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, BodyPartReader):
                return error(400, "INVALID_FILE", "nested multipart is not supported")
            name = part.name
            if name == "metadata":
                metadata = json.loads(await part.read())
            elif name == "file":
                if metadata is None or not metadata.get("path"):
                    return error(400, "INVALID_FILE_METADATA", "metadata file is missing")
                target = self._host_path(record, str(metadata["path"]))
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as handle:  # follows links, as execd's os.OpenFile does
                    while chunk := await part.read_chunk(1 << 16):
                        handle.write(chunk)
                mode = int(metadata.get("mode") or 0)
                if mode:
                    target.chmod(int(str(mode), 8))
                metadata = None
        return web.Response(status=200)

    async def _download(self, request: web.Request, record: FakeSandbox) -> web.StreamResponse:
        path = request.query.get("path", "")
        if not path:
            return error(400, "MISSING_QUERY", "missing query parameter 'path'")
        target = self._host_path(record, path)
        if not target.exists():
            return error(404, "FILE_NOT_FOUND", f"file not found. {path}")
        return web.FileResponse(target, headers={"Content-Type": "application/octet-stream"})

    async def _interrupt(self, request: web.Request, _record: FakeSandbox) -> web.Response:
        command_id = request.query.get("id", "")
        background = self._background.get(command_id)
        if background is not None:
            if not background.running:
                return error(500, "RUNTIME_ERROR", f"command session {command_id} is not running")
            background.interrupt()
            return web.Response(status=200)
        run = self._commands.get(command_id)
        if run is not None:
            run.cancel()
        return web.Response(status=200)

    # ---------------------------------------------------------------- background commands

    async def _start_background(
        self, request: web.Request, record: FakeSandbox, command: Command
    ) -> web.StreamResponse:
        """execd's ``runBackgroundCommand``: ``init``, start detached, ``execution_complete``."""
        command_id = secrets.token_hex(8)
        logs = Path(record.local.root).parent / "execd-logs"
        logs.mkdir(exist_ok=True)
        background = await BackgroundCommand.start(
            command_id,
            record,
            command,
            log=logs / f"{command_id}.log",
            env={**os.environ, "HOME": str(record.local.root), **command.env_dict},
        )
        self._background[command_id] = background
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        events = _EventWriter(response)
        await events.send({"type": "init", "text": command_id})
        await events.send({"type": "execution_complete", "execution_time": 0})
        await asyncio.sleep(self.grace_seconds)
        return response

    def _parse_command(self, body: object, record: FakeSandbox) -> Command | web.Response:
        """The local command for a ``RunCommandRequest``, or the error execd answers."""
        line = body.get("command") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(line, str) or not line.strip():
            return error(400, "INVALID_REQUEST_BODY", "command is required")
        workspace = Path(record.local.root)
        host_cwd = self._host_path(record, str(body.get("cwd") or ROOT))
        try:
            relative = host_cwd.relative_to(workspace).as_posix()
        except ValueError:
            return error(400, "INVALID_REQUEST_BODY", f"the fake runs commands under {ROOT} only")
        timeout_ms = body.get("timeout")
        timeout = timeout_ms / 1000 if isinstance(timeout_ms, int) and timeout_ms > 0 else None
        rewritten = _REWRITE.sub(lambda m: str(self._host_path(record, m.group(1))), line)
        cwd = "" if relative == "." else relative
        env = self._command_env(record)  # the image's PATH and the egress gateway
        return Command((self.shell, "-c", rewritten), cwd=cwd, timeout=timeout, env=env)

    async def _command(self, request: web.Request, record: FakeSandbox) -> web.StreamResponse:
        body = await request.json()
        command = self._parse_command(body, record)
        if isinstance(command, web.Response):
            return command
        try:
            self.service.sandboxes.require_running(record.id)
        except SandboxNotRunning:
            return web.Response(status=502, text="sandbox is paused")
        if isinstance(body, dict) and body.get("background") is True:
            return await self._start_background(request, record, command)
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        events = _EventWriter(response)
        command_id = secrets.token_hex(8)
        started = time.monotonic()
        await events.send({"type": "init", "text": command_id})
        result, killed = await self._run(events, record, command, command_id)
        if result.cancelled:
            # The sandbox was deleted: execd died with it (the server kills the
            # container), so the stream is cut mid-body, with no terminal event.
            cut_connection(request)
            return response
        if result.exit_code == 0 and not (result.timed_out or killed):
            elapsed = int((time.monotonic() - started) * 1000)
            await events.send({"type": "execution_complete", "execution_time": elapsed})
        else:
            code = -1 if result.timed_out or killed else result.exit_code
            reason = "signal: killed" if code == -1 else f"exit status {code}"
            failure = {"ename": "CommandExecError", "evalue": str(code), "traceback": [reason]}
            await events.send({"type": "error", "error": failure})
        # execd keeps the stream open a little after the last event.
        await asyncio.sleep(self.grace_seconds)
        return response

    async def _run(
        self, events: _EventWriter, record: FakeSandbox, command: Command, command_id: str
    ) -> tuple[ExecResult, bool]:
        """Run ``command``, one event per output line; ``(result, interrupted)``."""
        splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}

        async def consume() -> ExecResult:
            final = ExecResult(exit_code=-1)
            async with record.local.exec_stream(command) as stream:
                async for event in stream:
                    if isinstance(event, OutputChunk):
                        kind = event.stream.value
                        for text in splitters[kind].feed(event.data):
                            await events.send({"type": kind, "text": text})
                    else:
                        final = event
            return final

        run = asyncio.ensure_future(consume())
        pinger = asyncio.ensure_future(
            events.ping(self.ping_seconds, lambda: self.held_until_running(record))
        )
        self._commands[command_id] = run
        killed = False
        try:
            result = await run
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the client went away: execd's request context is done
            killed = True  # interrupted through DELETE /command
            result = ExecResult(exit_code=-1)
        finally:
            pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pinger
            self._commands.pop(command_id, None)
        if result.cancelled:
            return result, killed  # deleted with its sandbox: the tailer died too
        for kind, splitter in splitters.items():
            for text in splitter.flush():
                await events.send({"type": kind, "text": text})
        return result, killed


class _EventWriter:
    """execd's event framing: one JSON object, then a blank line; writes serialised."""

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response
        self._lock = asyncio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        event["timestamp"] = now_ms()
        async with self._lock:
            await self._response.write(json.dumps(event).encode() + b"\n\n")

    async def ping(self, seconds: float, frozen: Callable[[], Awaitable[None]]) -> None:
        """Keep-alive events every ``seconds`` while a command runs (none while ``frozen``
        waits: a paused sandbox's execd sends nothing)."""
        while True:
            await asyncio.sleep(seconds)
            await frozen()
            await self.send({"type": "ping", "text": "pong"})
