"""The fake's toolbox under ``{toolboxProxyUrl}/{id}``: execute, home directory, files."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import posixpath
import shutil
import stat
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiohttp import web

from mango.fakes import FakeSandbox
from mango.provider import Command
from mango_provider_daytona.fake.state import DaytonaState, error

__all__ = ["PROCESSES_PREFIX", "ToolboxRoutes"]

_DOWNLOAD_BOUNDARY = "DAYTONA-FILE-BOUNDARY"
_SHELL_EXEC = ("/bin/sh", "-c", "exec /bin/sh 2>&1")
# The wrapper's control files live under ${TMPDIR:-/tmp}/.mango-exec. The fake's
# sandboxes are host processes, whose /tmp every sandbox (and every other process
# on the machine) shares; a real sandbox's /tmp is its own, so each fake sandbox
# gets a private TMPDIR beside its workspace, and the file API maps the path there.
_CONTROL_PREFIX = "/tmp/.mango-exec"  # noqa: S108
# Staged stdin: commands read it at this literal path, so it stays on the host's
# /tmp (each file has a fresh random name).
_STDIN_PREFIX = "/tmp/.mango-stdin"  # noqa: S108
PROCESSES_PREFIX = "/tmp/.mango-processes"  # noqa: S108
"""mango's background-process table; moved into the private TMPDIR in every command line."""


def _under(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + "/")


def _private_tmp(record: FakeSandbox) -> Path:
    """The sandbox's own TMPDIR: in its session directory, removed with it."""
    return Path(record.local.root).parent / "tmp"


class ToolboxRoutes(DaytonaState):
    """The toolbox's handlers; :class:`~mango_provider_daytona.fake.DaytonaFake` routes them."""

    def _running(self, request: web.Request) -> FakeSandbox | web.Response:
        record = self.record(request.match_info["id"])
        if record is None:
            return error(404, "sandbox not found")
        if self.state(record) != "started":
            return error(400, f"sandbox is {self.state(record)}")
        return record

    def _allowed(self, record: FakeSandbox, path: str) -> Path | None:
        if not path:
            return None
        root = os.path.normpath(record.local.root)
        # The daemon resolves a relative path against its working directory, the home.
        target = os.path.normpath(Path(root, path))
        if target == root or target.startswith(root + "/"):
            return Path(target)
        if _under(target, _CONTROL_PREFIX):
            return _private_tmp(record) / os.path.relpath(target, "/tmp")  # noqa: S108
        if _under(target, _STDIN_PREFIX):
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
            return error(400, "command cannot be empty or whitespace-only")
        timeout = body.get("timeout")
        tmp = _private_tmp(record)
        tmp.mkdir(mode=0o700, exist_ok=True)
        # The background-process table's literal /tmp path: the sandbox's own /tmp.
        line = line.replace(PROCESSES_PREFIX, str(tmp / ".mango-processes"))
        command = Command(
            argv=_SHELL_EXEC,
            stdin=line.encode(),
            env={"TMPDIR": str(tmp)},
            timeout=float(timeout) if isinstance(timeout, int) and timeout > 0 else None,
        )
        # The daemon runs the command with exec.Command, not bound to the request: a client
        # that goes away (a reset, a proxy's 502) leaves it running.
        run = asyncio.ensure_future(record.local.exec(command))
        self.executions.append(run)
        result = await asyncio.shield(run)
        if result.timed_out:
            return error(408, "command execution timeout")
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
            return error(403, "the fake refuses this path")
        mode = int(request.query.get("mode") or "0755", 8)
        try:
            target.mkdir(mode=mode, parents=True, exist_ok=True)
        except OSError as exc:
            return error(400, str(exc))
        return web.Response(status=201)

    async def file_info(self, request: web.Request) -> web.Response:
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        target = self._allowed(record, request.query.get("path", ""))
        if target is None:
            return error(403, "the fake refuses this path")
        try:
            info = target.stat()  # follows symlinks, as the daemon's os.Stat does
        except FileNotFoundError:
            return error(404, "file not found")
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
        """The daemon's ``DeleteFile``: ``os.Stat`` first (it follows a link, so a dangling
        one is "not found"), a directory refused without ``recursive``, then ``os.Remove``
        or ``os.RemoveAll`` (which removes a link itself)."""
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        target = self._allowed(record, request.query.get("path", ""))
        if target is None:
            return error(403, "the fake refuses this path")
        recursive = request.query.get("recursive") == "true"
        if not target.exists():
            return error(404, f"stat {target}: no such file or directory")
        if target.is_dir() and not recursive:
            return error(400, "cannot delete directory without recursive flag")
        try:
            if recursive and target.is_dir() and not target.is_symlink():
                await asyncio.to_thread(shutil.rmtree, target)
            else:
                target.unlink()
        except OSError as exc:
            return error(400, str(exc))
        return web.Response(status=204)

    async def move_file(self, request: web.Request) -> web.Response:
        """The daemon's ``MoveFile``: the source and the destination's parent through
        ``os.Stat`` (404 if missing), an existing destination 409, then ``os.Rename``."""
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        source = self._allowed(record, request.query.get("source", ""))
        destination = self._allowed(record, request.query.get("destination", ""))
        if source is None or destination is None:
            return error(400, "source and destination paths are required")
        problem = self._unmovable(source, destination)
        if problem is not None:
            return problem
        try:
            source.rename(destination)
        except OSError as exc:
            return error(400, f"failed to move file: {exc}")
        return web.Response(status=200)

    @staticmethod
    def _unmovable(source: Path, destination: Path) -> web.Response | None:
        if not source.exists():
            return error(404, f"stat {source}: no such file or directory")
        if not destination.parent.exists():
            return error(404, f"stat {destination.parent}: no such file or directory")
        if destination.exists():
            return error(409, "destination already exists")
        return None

    async def search_files(self, request: web.Request) -> web.Response:
        """The daemon's ``SearchFiles``: ``filepath.Walk`` from ``path`` (an ``lstat`` per
        entry, never into a link, each directory in name order, ``path`` itself first), the
        paths whose name matches ``pattern`` (Go's ``filepath.Match``, dots not special)."""
        record = self._running(request)
        if isinstance(record, web.Response):
            return record
        given, pattern = request.query.get("path", ""), request.query.get("pattern", "")
        if not given or not pattern:
            return error(400, "path and pattern are required")
        root = self._allowed(record, given)
        if root is None:
            return error(403, "the fake refuses this path")
        matches: list[str] = []

        def walk(host: Path, shown: str) -> None:
            try:
                info = host.lstat()
            except OSError:
                return  # Walk's callback answers SkipDir for an error
            if fnmatch.fnmatchcase(host.name if shown != given else Path(given).name, pattern):
                matches.append(shown)
            if stat.S_ISDIR(info.st_mode):
                try:
                    names = sorted(child.name for child in host.iterdir())
                except OSError:
                    return
                for name in names:
                    walk(host / name, posixpath.join(shown, name))

        await asyncio.to_thread(walk, root, given)
        return web.json_response({"files": matches})

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
        if (status is not None or target is None) and self.legacy_daemon:
            # Before the typed errors: a text part, "not found or invalid" for a directory too.
            await response.write(
                (
                    f"\r\n--{_DOWNLOAD_BOUNDARY}\r\n"
                    f'Content-Disposition: form-data; name="error"; filename="{quoted}"\r\n'
                    "Content-Type: text/plain; charset=utf-8\r\n\r\n"
                    f"file not found or invalid: {path}"
                ).encode()
            )
            return
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
            length = "" if self.legacy_daemon else f"Content-Length: {size}\r\n"
            await response.write(
                (
                    f"\r\n--{_DOWNLOAD_BOUNDARY}\r\n"
                    f'Content-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                    f"Content-Type: application/octet-stream\r\n{length}\r\n"
                ).encode()
            )
            while chunk := handle.read(256 * 1024):
                await response.write(chunk)
