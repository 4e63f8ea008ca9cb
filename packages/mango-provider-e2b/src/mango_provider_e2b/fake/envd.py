"""The fake envd: processes (Connect server-streams and unary calls) and files."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import posixpath
import shutil
import signal
import stat as stat_module
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeSandbox, cut_connection, mark, rfc3339
from mango_provider_e2b.connect import ConnectError, decode_envelopes, encode_envelope, end_stream
from mango_provider_e2b.fake.common import (
    Reply,
    Routes,
    api_error,
    as_object,
    connect_error,
    replying,
)
from mango_provider_e2b.fake.config import STATE_DIR, WORKSPACE
from mango_provider_e2b.fake.processes import FakeProcess, Listener, go_status

__all__ = ["Envd"]


@attrs.define(eq=False)
class Envd(Routes):
    """envd's routes (the sandbox's side: its access token, its processes and files)."""

    def routes(self) -> list[web.AbstractRouteDef]:
        """envd's routes, in registration order (``Start`` before the other methods)."""
        wrap = replying
        return [
            web.post("/process.Process/Start", wrap(self.start)),
            web.post("/process.Process/Connect", wrap(self.connect)),
            web.post("/process.Process/{method}", wrap(self.process_unary)),
            web.post("/filesystem.Filesystem/{method}", wrap(self.filesystem)),
            web.get("/files", wrap(self.read_file)),
            web.post("/files", wrap(self.write_file)),
        ]

    @staticmethod
    def _workspace(record: FakeSandbox) -> str:
        return str(record.local.root)

    @staticmethod
    def _state(record: FakeSandbox) -> str:
        # Beside the workspace, private to the sandbox: the fake's /var/lib/mango.
        state = Path(record.local.root).parent / "fsroot-var-lib-mango"
        state.mkdir(exist_ok=True)
        return str(state)

    def _rewrite(self, record: FakeSandbox, arg: str) -> str:
        # Commands run as host processes: the two absolute prefixes mango uses are moved.
        arg = arg.replace(WORKSPACE, self._workspace(record))
        return arg.replace(STATE_DIR, self._state(record)) if STATE_DIR in arg else arg

    def _host_path(self, record: FakeSandbox, path: str, *, cwd: bool = False) -> str:
        if not path:
            return self._workspace(record)
        if not path.startswith("/"):
            path = posixpath.join(WORKSPACE, path)  # the fake's home is the workspace
        path = posixpath.normpath(path)
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return self._workspace(record) + path[len(WORKSPACE) :]
        if path == STATE_DIR or path.startswith(STATE_DIR + "/"):
            return self._state(record) + path[len(STATE_DIR) :]
        if cwd and path == "/":
            return self._workspace(record)
        raise connect_error("permission_denied", f"the fake sandbox has only {WORKSPACE}: {path}")

    def _sandbox_path(self, record: FakeSandbox, host: str) -> str:
        return WORKSPACE + host[len(self._workspace(record)) :]

    # ------------------------------------------------------------ envd: processes

    async def start(self, request: web.Request) -> web.StreamResponse:
        record = self.envd_record(request)
        process = await self._spawn(request, record)
        self.service.processes(record.id)[process.pid] = process
        self.service.notify_change()
        return await self._stream(request, process, process.first, start=True, record=record)

    async def connect(self, request: web.Request) -> web.StreamResponse:
        """``Connect``: a new stream on a running process (by pid or tag), from now on.

        A process that is not running is a ``not_found`` error at the end of
        an otherwise empty stream (envd before its retained exits: the
        behaviour clients must handle anyway). ``Connect-Timeout-Ms`` bounds
        the stream (``deadline_exceeded``), never the process.
        """
        record = self.envd_record(request)
        body = await self._stream_request(request)
        try:
            process = self._process(record, body)
        except Reply:
            selector = as_object(body.get("process"))
            response = web.StreamResponse(headers={"Content-Type": "application/connect+json"})
            await response.prepare(request)
            message = f"process with {'tag' if 'tag' in selector else 'pid'} not found"
            await response.write(end_stream(ConnectError("not_found", message)))
            await response.write_eof()
            return response
        return await self._stream(request, process, process.listen(), start=False, record=record)

    async def _stream_request(self, request: web.Request) -> dict[str, Any]:
        if request.headers.get("Content-Type", "").split(";")[0] != "application/connect+json":
            raise connect_error("invalid_argument", "expected application/connect+json")
        envelopes = [envelope async for envelope in decode_envelopes(_once(await request.read()))]
        if len(envelopes) != 1:
            raise connect_error("invalid_argument", "expected exactly one request envelope")
        return envelopes[0].payload

    async def _spawn(self, request: web.Request, record: FakeSandbox) -> FakeProcess:
        body = await self._stream_request(request)
        config = as_object(body.get("process"))
        cmd = config.get("cmd")
        args = config.get("args") or []
        if not isinstance(cmd, str) or not isinstance(args, list):
            raise connect_error("invalid_argument", "process.cmd and process.args are required")
        workspace = self._workspace(record)
        cwd = self._host_path(record, str(config.get("cwd") or WORKSPACE), cwd=True)
        if not os.path.isdir(cwd):
            raise connect_error("invalid_argument", f"cwd '{config.get('cwd')}' does not exist")
        envs = as_object(config.get("envs"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": workspace,
            "LANG": "C.UTF-8",
            "USER": "root",
            **{str(k): str(v) for k, v in envs.items()},
            # Every descendant inherits it: a pause freezes them, a delete kills them.
            **mark(record.id),
        }
        stdin = body.get("stdin", True) is not False
        tag = body.get("tag") if isinstance(body.get("tag"), str) else None
        try:
            process = await FakeProcess.start(
                cmd,
                [self._rewrite(record, str(arg)) for arg in args],
                cwd=cwd,
                env=env,
                stdin=stdin,
                tag=tag,
                config=config,
            )
        except OSError as exc:
            raise connect_error("invalid_argument", f"error starting process: {exc}") from None
        return process

    async def _stream(
        self,
        request: web.Request,
        process: FakeProcess,
        listener: Listener,
        *,
        start: bool,
        record: FakeSandbox,
    ) -> web.StreamResponse:
        timer = None
        timed_out = asyncio.Event()
        timeout_ms = request.headers.get("Connect-Timeout-Ms", "")
        watch = None if start or not timeout_ms.isdigit() else int(timeout_ms) / 1000
        if start and timeout_ms.isdigit():

            def expire() -> None:
                timed_out.set()
                process.signal(signal.SIGKILL)

            timer = asyncio.get_running_loop().call_later(int(timeout_ms) / 1000, expire)
        response = web.StreamResponse(headers={"Content-Type": "application/connect+json"})
        try:
            await response.prepare(request)
            await response.write(encode_envelope({"event": {"start": {"pid": process.pid}}}))
            try:
                edge = None if start else self.config.connect_deadline
                async with asyncio.timeout(edge):
                    async with asyncio.timeout(watch) as watched:
                        if not await self._relay_unless_paused(response, listener, record):
                            # The sandbox paused: its VM stopped, the edge drops the stream
                            # (the process is frozen; Connect takes it up after the resume).
                            process.stop_listening(listener)
                            cut_connection(request)
                            return response
                        returncode = await process.wait()
            except TimeoutError:
                process.stop_listening(listener)
                if watch is not None and watched.expired():
                    # The client's own deadline on a Connect stream: the process runs on.
                    await response.write(
                        end_stream(ConnectError("deadline_exceeded", "context deadline exceeded"))
                    )
                    await response.write_eof()
                    return response
                # The edge ends a Connect stream that outlived its deadline; the process runs on.
                self.service.cut_streams += 1
                self.service.notify_change()
                cut_connection(request)
                return response
            if process.torn_down and not self.config.kill_resets_streams:
                # The VM is gone but nothing resets the connection: it hangs.
                await self.service.stopping.wait()
                cut_connection(request)
                return response
            if process.torn_down:
                # The sandbox was deleted and envd with it: no end event, no end of stream.
                # E2B's proxy aborts the response (Go's ErrAbortHandler), as done here.
                cut_connection(request)
                return response
            if timed_out.is_set():
                await response.write(end_stream(ConnectError("deadline_exceeded", "timed out")))
            else:
                await response.write(encode_envelope({"event": {"end": go_status(returncode)}}))
                await response.write(end_stream())
            await response.write_eof()
        except ConnectionResetError:
            # The client left: envd lets the process run on and drops its output.
            process.stop_listening(listener)
        except asyncio.CancelledError:
            process.stop_listening(listener)
            raise
        finally:
            if timer is not None and process.process.returncode is not None:
                timer.cancel()
        return response

    async def _relay_unless_paused(
        self, response: web.StreamResponse, listener: Listener, record: FakeSandbox
    ) -> bool:
        """:meth:`_relay`, unless the sandbox pauses first (``False``)."""
        paused = self.service.paused_signal(record.id)
        if paused.is_set():
            return False
        relay = asyncio.ensure_future(self._relay(response, listener))
        pause = asyncio.ensure_future(paused.wait())
        try:
            await asyncio.wait({relay, pause}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            pause.cancel()
            if not relay.done():
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay
        if relay.cancelled():
            return False
        relay.result()
        return True

    @staticmethod
    async def _relay(response: web.StreamResponse, listener: Listener) -> None:
        ended = 0
        while ended < 2:
            event = await listener.get()
            if event is None:
                ended += 1
                continue
            name, chunk = event
            data = {name: base64.b64encode(chunk).decode("ascii")}
            await response.write(encode_envelope({"event": {"data": data}}))

    def _process(self, record: FakeSandbox, body: dict[str, Any]) -> FakeProcess:
        selector = as_object(body.get("process"))
        table = self.service.processes(record.id)
        pid = selector.get("pid")
        tag = selector.get("tag")
        for process in table.values():
            running = process.process.returncode is None
            if running and (
                (pid is not None and process.pid == pid) or (tag and process.tag == tag)
            ):
                return process
        raise connect_error("not_found", f"process with pid {pid} not found")

    async def process_unary(self, request: web.Request) -> web.Response:
        record = self.envd_record(request)
        method = request.match_info["method"]
        body = await self.json_body(request)
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
                raise connect_error("invalid_argument", "input.stdin is required")
            try:
                await process.write_stdin(base64.b64decode(data))
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise connect_error("internal", f"error writing to stdin: {exc}") from None
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
                raise connect_error("unimplemented", f"invalid signal: {body.get('signal')}")
            process.signal(number)
            return web.json_response({})
        raise connect_error("unimplemented", f"process.Process/{method} is not faked")

    # ------------------------------------------------------------ envd: files

    def _entry(self, record: FakeSandbox, host: str, path: str | None = None) -> dict[str, Any]:
        """envd's ``EntryInfo`` of ``host`` (e2b-dev/infra ``shared/pkg/filesystem/entry.go``).

        An ``lstat``, except that a link's ``type`` and ``mode`` are its target's
        (``FILE_TYPE_UNSPECIFIED`` and no mode when the target is missing) and its
        ``symlinkTarget`` is set (the resolved target, or the link's own path when
        it cannot be resolved). proto3 JSON leaves zero values out.
        """
        info = os.lstat(host)
        mode = info.st_mode
        target: str | None = None
        if stat_module.S_ISLNK(info.st_mode):
            resolved = os.path.realpath(host)
            try:
                mode = os.stat(resolved).st_mode
                target = self._shown(record, resolved)
            except OSError:
                mode = 0
                target = self._sandbox_path(record, host)
        kind = "FILE_TYPE_UNSPECIFIED"
        if mode and stat_module.S_ISDIR(mode):
            kind = "FILE_TYPE_DIRECTORY"
        elif mode and stat_module.S_ISREG(mode):
            kind = "FILE_TYPE_FILE"
        path = path or self._sandbox_path(record, host)
        entry: dict[str, Any] = {
            "name": posixpath.basename(path) or "/",
            "type": kind,
            "path": path,
            "size": str(info.st_size),
            "mode": stat_module.S_IMODE(mode) & 0o777,
            "permissions": stat_module.filemode(info.st_mode),
            "owner": "root",
            "group": "root",
            "modifiedTime": rfc3339(datetime.fromtimestamp(info.st_mtime, UTC)),
        }
        if target is not None:
            entry["symlinkTarget"] = target
        return {
            key: value
            for key, value in entry.items()
            if value not in (0, "0", "FILE_TYPE_UNSPECIFIED")
        }

    def _shown(self, record: FakeSandbox, host: str) -> str:
        """A host path as the sandbox names it (the workspace mapped back, the rest as it is)."""
        workspace = self._workspace(record)
        if host == workspace or host.startswith(workspace + "/"):
            return self._sandbox_path(record, host)
        return host

    def _walk(self, record: FakeSandbox, requested: str, resolved: str, depth: int) -> list[Any]:
        """envd's ``walkDir``: ``filepath.WalkDir`` order (each directory sorted by name,
        never into a link), ``depth`` levels, entries that vanished skipped."""
        entries: list[Any] = []

        def walk(directory: str, relative: str, level: int) -> None:
            try:
                names = sorted(os.listdir(directory))
            except OSError as exc:
                raise connect_error(
                    "internal", f"error reading directory {resolved}: {exc}"
                ) from None
            for name in names:
                host = os.path.join(directory, name)
                shown = posixpath.join(relative, name)
                try:
                    entries.append(self._entry(record, host, posixpath.join(requested, shown)))
                    is_dir = stat_module.S_ISDIR(os.lstat(host).st_mode)
                except FileNotFoundError:
                    continue
                if is_dir and level < depth:
                    walk(host, shown, level + 1)

        walk(resolved, "", 1)
        return entries

    async def filesystem(self, request: web.Request) -> web.Response:
        record = self.envd_record(request)
        method = request.match_info["method"]
        body = await self.json_body(request)
        if method == "Move":
            return self._move(record, body)
        path = body.get("path")
        if not isinstance(path, str):
            raise connect_error("invalid_argument", "path is required")
        host = self._host_path(record, path)
        if method == "Stat":
            try:
                return web.json_response({"entry": self._entry(record, host)})
            except FileNotFoundError:
                raise connect_error("not_found", f"file not found: {path}") from None
            except NotADirectoryError:
                # envd: Go's os.IsNotExist is false for ENOTDIR, so the lstat error is internal.
                raise connect_error(
                    "internal", f"error getting file info: lstat {path}: not a directory"
                ) from None
        if method == "ListDir":
            return await self._list_dir(record, body, path, host)
        if method == "MakeDir":
            return self._make_dir(record, path, host)
        if method == "Remove":
            await self._remove(host)
            return web.json_response({})
        raise connect_error("unimplemented", f"filesystem.Filesystem/{method} is not faked")

    async def _list_dir(
        self, record: FakeSandbox, body: dict[str, Any], path: str, host: str
    ) -> web.Response:
        depth = body.get("depth") or 1
        if not isinstance(depth, int) or depth < 0:
            raise connect_error("invalid_argument", f"invalid depth: {depth!r}")
        requested = self._sandbox_path(record, host)
        # ListDir follows a link at the path itself (filepath.EvalSymlinks), then walks.
        resolved = os.path.realpath(host)
        if not os.path.lexists(host) or not os.path.exists(resolved):
            raise connect_error("not_found", f"path not found: {path}")
        workspace = self._workspace(record)
        if resolved != workspace and not resolved.startswith(workspace + "/"):
            raise connect_error("permission_denied", f"the fake sandbox has only {WORKSPACE}")
        if not os.path.isdir(resolved):
            raise connect_error("invalid_argument", f"path is not a directory: {requested}")
        entries = await asyncio.to_thread(self._walk, record, requested, resolved, depth)
        return web.json_response({"entries": entries} if entries else {})

    def _make_dir(self, record: FakeSandbox, path: str, host: str) -> web.Response:
        """envd's ``MakeDir``: ``os.Stat`` first (it follows a link), then ``MkdirAll``."""
        if os.path.isdir(host):
            raise connect_error("already_exists", f"directory already exists: {path}")
        if os.path.exists(host):
            raise connect_error(
                "invalid_argument", f"path already exists but it is not a directory: {path}"
            )
        try:
            os.makedirs(host, exist_ok=True)
        except OSError as exc:
            raise connect_error("internal", f"error creating directory: {exc}") from None
        return web.json_response({"entry": self._entry(record, host)})

    @staticmethod
    async def _remove(host: str) -> None:
        """envd's ``Remove`` is ``os.RemoveAll``: recursive, and a missing path is success."""
        try:
            if os.path.isdir(host) and not os.path.islink(host):
                await asyncio.to_thread(shutil.rmtree, host)
            else:
                os.unlink(host)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise connect_error("internal", f"error removing file or directory: {exc}") from None

    def _move(self, record: FakeSandbox, body: dict[str, Any]) -> web.Response:
        """envd's ``Move``: the destination's parents made, then ``os.Rename`` (it overwrites)."""
        source, destination = body.get("source"), body.get("destination")
        if not isinstance(source, str) or not isinstance(destination, str):
            raise connect_error("invalid_argument", "source and destination are required")
        host_source = self._host_path(record, source)
        host_destination = self._host_path(record, destination)
        try:
            os.makedirs(os.path.dirname(host_destination), exist_ok=True)
        except OSError as exc:
            raise connect_error("internal", f"error creating directories: {exc}") from None
        try:
            os.rename(host_source, host_destination)
        except FileNotFoundError as exc:
            raise connect_error("not_found", f"source file not found: {exc}") from None
        except OSError as exc:
            raise connect_error("internal", f"error renaming: {exc}") from None
        return web.json_response({"entry": self._entry(record, host_destination)})

    async def read_file(self, request: web.Request) -> web.StreamResponse:
        record = self.envd_record(request)
        host = self._host_path(record, request.query.get("path", ""))
        if not os.path.exists(host):
            raise api_error(404, f"path '{request.query.get('path')}' does not exist")
        if os.path.isdir(host):
            raise api_error(400, f"path '{request.query.get('path')}' is a directory")
        return web.FileResponse(host, headers={"Content-Type": "application/octet-stream"})

    async def write_file(self, request: web.Request) -> web.Response:
        record = self.envd_record(request)
        sandbox_path = request.query.get("path", "")
        host = self._host_path(record, sandbox_path)
        if os.path.isdir(host):
            raise api_error(400, f"path '{sandbox_path}' is a directory")
        os.makedirs(os.path.dirname(host), exist_ok=True)
        content_type = request.headers.get("Content-Type", "")
        if not content_type.startswith("multipart/") and _older(self.config.envd_version, "0.5.7"):
            # envd before 0.5.7 (e2b-dev/infra upload.go) reads multipart only.
            raise api_error(
                500,
                "error parsing multipart form: request Content-Type isn't multipart/form-data",
            )
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


def _older(version: str, than: str) -> bool:
    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(piece) for piece in text.split(".") if piece.isdigit())

    return parts(version) < parts(than)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
