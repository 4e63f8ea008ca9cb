"""The official OpenSandbox SDK drives the fake: proof that the fake speaks the vendor's protocol.

Lifecycle (create with metadata, list by metadata, info, kill), commands with
exit codes and exact output lines, file write/read (chunked uploads in direct
mode), the egress policy API, a port's endpoint (the server mango exposes
answers through the endpoint the SDK resolves); both through the server proxy
and directly.
The SDK is synchronous, so it runs in a worker thread while the fake serves
on the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx
import pytest
from opensandbox.config.connection_sync import ConnectionConfigSync
from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule, SandboxFilter
from opensandbox.sync.manager import SandboxManagerSync
from opensandbox.sync.sandbox import SandboxSync

from mango.provider import Command, InvalidInput, SandboxNotFound, SandboxSpec
from mango_provider_opensandbox.conformance import free_port
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.layout import EGRESS_PORT, EXECD_PORT

IMAGE = "python:3.12-slim"


def _config(fake: FakeOpenSandbox, server_proxy: bool) -> ConnectionConfigSync:
    return ConnectionConfigSync(
        domain=fake.url.removeprefix("http://"),
        protocol="http",
        api_key=fake.api_key,
        use_server_proxy=server_proxy,
        disable_metrics=True,
        request_timeout=timedelta(seconds=30),
    )


def _sdk_session(fake: FakeOpenSandbox, server_proxy: bool) -> dict[str, Any]:
    """Everything the SDK does, in one synchronous function (run in a thread)."""
    config = _config(fake, server_proxy)
    metadata = {"io.mango.managed": "true", "oracle": "yes"}
    sandbox = SandboxSync.create(
        IMAGE,
        metadata=metadata,
        entrypoint=["tail", "-f", "/dev/null"],
        resource={"cpu": "1", "memory": "1Gi"},
        network_policy=NetworkPolicy(
            defaultAction="deny", egress=[NetworkRule(action="allow", target="a.example.test")]
        ),
        connection_config=config,
    )
    found: dict[str, Any] = {"id": sandbox.id}
    try:
        ok = sandbox.commands.run("printf 'one\\ntwo\\n'; echo err >&2")
        found["ok"] = (
            ok.exit_code,
            [message.text for message in ok.logs.stdout],
            [message.text for message in ok.logs.stderr],
        )
        failed = sandbox.commands.run("exit 7")
        found["failed"] = (failed.exit_code, failed.error.value if failed.error else None)
        payload = bytes(range(256)) * 64
        sandbox.files.write_file("/workspace/sdk/data.bin", payload)
        found["roundtrip"] = sandbox.files.read_bytes("/workspace/sdk/data.bin") == payload
        info = sandbox.files.get_file_info(["/workspace/sdk/data.bin"])
        found["size"] = info["/workspace/sdk/data.bin"].size
        shell = sandbox.commands.run("cat sdk/data.bin | wc -c")
        found["shell_sees"] = "".join(message.text for message in shell.logs.stdout).strip()
        sandbox.patch_egress_rules([NetworkRule(action="allow", target="b.example.test")])
        sandbox.delete_egress_rules(["a.example.test"])
        policy = sandbox.get_egress_policy()
        found["policy"] = (
            policy.default_action,
            [(rule.action, rule.target) for rule in policy.egress or []],
        )
        manager = SandboxManagerSync.create(connection_config=config)
        try:
            listed = manager.list_sandbox_infos(SandboxFilter(metadata=metadata))
            found["listed"] = [item.id for item in listed.sandbox_infos]
            found["state"] = manager.get_sandbox_info(sandbox.id).status.state
        finally:
            manager.close()
    finally:
        sandbox.kill()
        sandbox.close()
    return found


async def test_sdk_drives_the_fake(fake: FakeOpenSandbox, server_proxy: bool) -> None:
    """The SDK's lifecycle, commands, files and egress calls all work against the fake."""
    found = await asyncio.to_thread(_sdk_session, fake, server_proxy)
    assert found["ok"] == (0, ["one", "two"], ["err"])  # execd: one event per line
    assert found["failed"] == (7, "7")
    assert found["roundtrip"] is True
    assert found["size"] == 256 * 64
    assert found["shell_sees"] == str(256 * 64)
    assert found["policy"] == ("deny", [("allow", "b.example.test")])
    assert found["listed"] == [found["id"]]
    assert found["state"] == "Running"
    assert fake.service.sandboxes.find(found["id"]).state.value == "deleted"
    proxied = fake.faults.count(path="/v1/sandboxes/{id}/proxy/{port}/{tail}")
    direct = fake.faults.count(path="/direct/{id}/{port}/{tail}")
    assert (proxied > 0, direct > 0) == (server_proxy, not server_proxy)


async def test_sdk_and_mango_share_the_wire(
    fake: FakeOpenSandbox, server_proxy: bool, make_provider: Any
) -> None:
    """A sandbox mango made is listed by the SDK under mango's metadata, and runs SDK commands."""
    provider = make_provider()
    sandbox = await provider.create("shared-wire", SandboxSpec(timeout=30))
    await sandbox.write_file("from-mango.txt", b"mango wrote this\n")

    def sdk_side() -> tuple[list[str], str]:
        config = _config(fake, server_proxy)
        manager = SandboxManagerSync.create(connection_config=config)
        try:
            labels = provider.ownership.labels("shared-wire")
            listed = manager.list_sandbox_infos(SandboxFilter(metadata=labels))
        finally:
            manager.close()
        connected = SandboxSync.connect(sandbox.ref.external_id, connection_config=config)
        try:
            run = connected.commands.run("cat /workspace/from-mango.txt")
            return [item.id for item in listed.sandbox_infos], run.logs.stdout[0].text
        finally:
            connected.close()

    ids, text = await asyncio.to_thread(sdk_side)
    assert ids == [sandbox.ref.external_id]
    assert text == "mango wrote this"
    result = await sandbox.exec(Command(("cat", "from-mango.txt")))
    assert result.stdout == b"mango wrote this\n"  # the same file, byte-exact through mango
    await sandbox.destroy()


def _sdk_background(fake: FakeOpenSandbox, server_proxy: bool) -> dict[str, Any]:
    """Background commands through the SDK: start, status, logs by cursor, interrupt."""
    import time

    from opensandbox.models.execd import RunCommandOpts

    config = _config(fake, server_proxy)
    sandbox = SandboxSync.create(
        IMAGE, entrypoint=["tail", "-f", "/dev/null"], connection_config=config
    )
    found: dict[str, Any] = {}
    try:
        script = "printf 'one\\ntwo'; echo err >&2; while [ ! -e go ]; do sleep 0.05; done; exit 3"
        started = sandbox.commands.run(script, opts=RunCommandOpts(background=True))
        assert started.id is not None
        deadline = time.monotonic() + 20
        logs = sandbox.commands.get_background_command_logs(started.id)
        while "err" not in logs.content and time.monotonic() < deadline:
            time.sleep(0.05)  # a bounded poll of the condition, as the SDK's users poll
            logs = sandbox.commands.get_background_command_logs(started.id)
        found["first"] = (logs.content, logs.cursor)
        found["running"] = sandbox.commands.get_command_status(started.id).running
        found["from_cursor"] = sandbox.commands.get_background_command_logs(started.id, 4).content
        sandbox.files.write_file("/workspace/go", b"")
        status = sandbox.commands.get_command_status(started.id)
        while status.running and time.monotonic() < deadline:
            time.sleep(0.05)
            status = sandbox.commands.get_command_status(started.id)
        found["ended"] = (status.running, status.exit_code)
        sleeper = sandbox.commands.run("sleep 60", opts=RunCommandOpts(background=True))
        assert sleeper.id is not None
        sandbox.commands.interrupt(sleeper.id)
        status = sandbox.commands.get_command_status(sleeper.id)
        while status.running and time.monotonic() < deadline:
            time.sleep(0.05)
            status = sandbox.commands.get_command_status(sleeper.id)
        found["interrupted"] = (status.running, status.exit_code)
    finally:
        sandbox.kill()
        sandbox.close()
    return found


async def test_sdk_drives_background_commands(fake: FakeOpenSandbox, server_proxy: bool) -> None:
    """execd's background commands: combined log read from a byte cursor, status, interrupt."""
    found = await asyncio.to_thread(_sdk_background, fake, server_proxy)
    assert found["first"] == ("one\ntwoerr\n", len("one\ntwoerr\n"))
    assert found["running"] is True
    assert found["from_cursor"] == "twoerr\n"  # the cursor is a byte offset in execd's sources
    assert found["ended"] == (False, 3)
    assert found["interrupted"] == (False, -1)  # the group got SIGTERM: Go's ExitCode() is -1


def _sdk_files(fake: FakeOpenSandbox, sandbox_id: str) -> dict[str, Any]:
    """execd's list, info, move, delete and mkdir as the SDK calls them (run in a thread)."""
    from opensandbox.exceptions import SandboxApiException
    from opensandbox.models.filesystem import DirectoryListEntry, MoveEntry, WriteEntry

    def status(call: Any) -> tuple[int | None, str | None]:
        try:
            call()
        except SandboxApiException as exc:
            return exc.status_code, exc.error.code
        return None, None

    connected = SandboxSync.connect(sandbox_id, connection_config=_config(fake, True))
    files = connected.files
    found: dict[str, Any] = {}
    try:
        flat = files.list_directory(DirectoryListEntry(path="/workspace/t"))
        found["flat"] = [(entry.path, entry.entry_type, entry.size) for entry in flat]
        deep = files.list_directory(DirectoryListEntry(path="/workspace/t", depth=3))
        found["deep"] = [entry.path for entry in deep]
        info = files.get_file_info(["/workspace/t/a.txt", "/workspace/t/link"])
        found["modes"] = {path: (item.entry_type, item.mode) for path, item in info.items()}
        found["list link"] = status(
            lambda: files.list_directory(DirectoryListEntry(path="/workspace/t/dirlink"))
        )
        found["list file"] = status(
            lambda: files.list_directory(DirectoryListEntry(path="/workspace/t/a.txt"))
        )
        found["list missing"] = status(
            lambda: files.list_directory(DirectoryListEntry(path="/workspace/t/nothing"))
        )
        found["move onto"] = status(
            lambda: files.move_files([MoveEntry(src="/workspace/t/b", dest="/workspace/t/a.txt")])
        )
        found["move dangling"] = status(
            lambda: files.move_files(
                [MoveEntry(src="/workspace/t/dangling", dest="/workspace/t/moved")]
            )
        )
        files.move_files([MoveEntry(src="/workspace/t/b", dest="/workspace/t/made/by/move")])
        found["delete dir as file"] = status(lambda: files.delete_files(["/workspace/t/sub"]))
        files.delete_files(["/workspace/t/dangling", "/workspace/t/nothing"])
        files.delete_directories(["/workspace/t/sub", "/workspace/t/dirlink"])
        files.create_directories([WriteEntry(path="/workspace/t/new/deeper", mode=700)])
        found["new"] = files.get_file_info(["/workspace/t/new/deeper"])[
            "/workspace/t/new/deeper"
        ].mode
    finally:
        connected.close()
    return found


async def test_sdk_drives_the_file_endpoints(fake: FakeOpenSandbox, make_provider: Any) -> None:
    """``/directories/list``, ``/files/info``, ``/files/mv``, the deletes and ``POST
    /directories`` answer the SDK as execd does; mango sees the result the same way."""
    provider = make_provider()
    sandbox = await provider.create("sdk-files", SandboxSpec(timeout=30))
    try:
        layout = (
            "mkdir -p t/sub/deep keep && printf 12345 > t/a.txt && chmod 640 t/a.txt && "
            "printf b > t/b && ln -s a.txt t/link && ln -s gone t/dangling && "
            "ln -s ../keep t/dirlink && printf x > t/sub/deep/x"
        )
        laid = await sandbox.exec(Command(("sh", "-c", layout)))
        assert laid.exit_code == 0, laid.stderr
        found = await asyncio.to_thread(_sdk_files, fake, sandbox.ref.external_id)
        kinds = [(path.rsplit("/", 1)[-1], kind) for path, kind, _size in found["flat"]]
        assert kinds == [
            ("a.txt", "file"),
            ("b", "file"),
            ("dangling", "symlink"),
            ("dirlink", "symlink"),
            ("link", "symlink"),
            ("sub", "directory"),
        ]  # an lstat per entry, each directory in name order
        assert found["flat"][0] == ("/workspace/t/a.txt", "file", 5)
        assert found["deep"][-3:] == [
            "/workspace/t/sub",
            "/workspace/t/sub/deep",
            "/workspace/t/sub/deep/x",
        ]  # descendants follow their parent; never into dirlink
        assert found["modes"]["/workspace/t/a.txt"] == ("file", 640)  # octal digits as decimal
        assert found["modes"]["/workspace/t/link"][0] == "symlink"
        assert found["list link"] == (400, "INVALID_REQUEST_BODY")
        assert found["list file"] == (400, "INVALID_REQUEST_BODY")
        assert found["list missing"] == (404, "FILE_NOT_FOUND")
        assert found["move onto"] == (500, "RUNTIME_ERROR")  # "destination path already exists"
        assert found["move dangling"] == (404, "FILE_NOT_FOUND")  # os.Stat follows the link
        assert found["delete dir as file"] == (500, "RUNTIME_ERROR")  # "path is a directory"
        assert found["new"] == 700
        seen = await sandbox.list_dir("t", recursive=True)  # type: ignore[attr-defined]
        assert {entry.path: entry.kind.value for entry in seen.entries} == {
            # DELETE /files keeps a dangling link (its os.Stat fails): execd's behaviour.
            "t/dangling": "symlink",
            "t/a.txt": "file",
            "t/link": "symlink",
            "t/made": "directory",
            "t/made/by": "directory",
            "t/made/by/move": "file",
            "t/new": "directory",
            "t/new/deeper": "directory",
        }
        assert await sandbox.exists("keep")  # type: ignore[attr-defined]  # dirlink's target
    finally:
        await sandbox.destroy()


def _sdk_pause(fake: FakeOpenSandbox, server_proxy: bool) -> dict[str, Any]:
    """Pause and resume through the SDK: the states on the way, the refusals, what is kept."""
    from opensandbox.exceptions import SandboxApiException

    config = _config(fake, server_proxy)
    sandbox = SandboxSync.create(
        IMAGE,
        metadata={"oracle": "pause"},
        entrypoint=["tail", "-f", "/dev/null"],
        connection_config=config,
    )
    found: dict[str, Any] = {"id": sandbox.id}
    manager = SandboxManagerSync.create(connection_config=config)

    def settle(wanted: str) -> list[str]:
        seen = [manager.get_sandbox_info(sandbox.id).status.state]
        for _ in range(1000):
            if seen[-1] == wanted:
                break
            seen.append(manager.get_sandbox_info(sandbox.id).status.state)
        return list(dict.fromkeys(seen))

    def refused(call: Any) -> int | None:
        try:
            call(sandbox.id)
        except SandboxApiException as exc:
            return exc.status_code
        return None

    try:
        sandbox.files.write_file("/workspace/kept.txt", "kept across the pause")
        sandbox.pause()
        found["pausing"] = settle("Paused")
        found["pause_again"] = refused(manager.pause_sandbox)
        resumed = SandboxSync.resume(sandbox.id, connection_config=config)
        try:
            found["running"] = manager.get_sandbox_info(sandbox.id).status.state
            found["kept"] = resumed.files.read_file("/workspace/kept.txt")
            run = resumed.commands.run("echo up")
            found["runs"] = [message.text for message in run.logs.stdout]
            found["resume_again"] = refused(manager.resume_sandbox)
        finally:
            resumed.close()
        sandbox.kill()
        found["gone"] = (refused(manager.pause_sandbox), refused(manager.resume_sandbox))
    finally:
        manager.close()
        sandbox.close()
    return found


async def test_sdk_pauses_and_resumes_the_fake(fake: FakeOpenSandbox, server_proxy: bool) -> None:
    """``POST /sandboxes/{id}/pause`` and ``/resume`` as the SDK calls them: 202, the states
    Pausing then Paused and Running, 409 for a second pause or resume, 404 once deleted, the
    workspace kept (the SDK's resume waits for execd's ping, held until the thaw)."""
    found = await asyncio.to_thread(_sdk_pause, fake, server_proxy)
    assert found["pausing"][-1] == "Paused"
    assert set(found["pausing"]) <= {"Running", "Pausing", "Paused"}
    assert found["pause_again"] == 409
    assert found["running"] == "Running"
    assert found["kept"] == "kept across the pause"
    assert found["runs"] == ["up"]
    assert found["resume_again"] == 409
    assert found["gone"] == (404, 404)


SERVE_PORT_SCRIPT = 'cd /workspace && exec python3 -m http.server "$1" --bind 127.0.0.1'


async def _answer(url: str, headers: Mapping[str, str], *, bound: float = 20.0) -> httpx.Response:
    """GET ``url`` until the sandbox's server answers it (it may not listen yet), at most
    ``bound`` seconds; the last answer, or the last transport error raised."""
    deadline = asyncio.get_running_loop().time() + bound
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        while True:
            try:
                response = await client.get(url, headers=dict(headers))
            except httpx.TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            else:
                if response.status_code == 200 or asyncio.get_running_loop().time() > deadline:
                    return response
            await asyncio.sleep(0.05)  # a bounded poll of the server's start, never asserted


async def test_sdk_and_mango_agree_on_an_exposed_port(
    fake: FakeOpenSandbox, server_proxy: bool, make_provider: Any
) -> None:
    """The endpoint mango exposes is the SDK's own (URL and headers), and a server the sandbox
    runs answers through it; the API key is not needed there, and a gone sandbox's port is
    SandboxNotFound (the SDK sees the same 404)."""
    from opensandbox.exceptions import SandboxException

    port = free_port()
    provider = make_provider()
    sandbox = await provider.create("exposed", SandboxSpec(timeout=60))
    token = secrets.token_hex(8)
    await sandbox.write_file("index.html", token.encode())
    server = asyncio.create_task(
        sandbox.exec(Command(("sh", "-c", SERVE_PORT_SCRIPT, "sh", str(port))))
    )
    try:
        exposed = await sandbox.expose_port(port)
        assert fake.api_key not in repr(exposed)
        assert fake.api_key not in exposed.headers.values()

        def sdk_endpoint() -> tuple[str, dict[str, str]]:
            connected = SandboxSync.connect(
                sandbox.ref.external_id, connection_config=_config(fake, server_proxy)
            )
            try:
                endpoint = connected.get_endpoint(port)
                return endpoint.endpoint, dict(endpoint.headers)
            finally:
                connected.close()

        endpoint, headers = await asyncio.to_thread(sdk_endpoint)
        assert exposed.url == f"http://{endpoint}"
        assert dict(exposed.headers) == headers
        # Direct endpoints sit behind execd's token; the server proxy needs nothing.
        assert bool(headers) is (not server_proxy)
        answer = await _answer(f"{exposed.url}/index.html", headers)
        assert (answer.status_code, answer.text) == (200, token)
        if headers:
            refused = await _answer(f"{exposed.url}/index.html", {}, bound=0)
            assert refused.status_code == 401
    finally:
        server.cancel()
        with contextlib.suppress(BaseException):
            await server
    await sandbox.destroy()
    with pytest.raises(SandboxNotFound):
        await sandbox.expose_port(port)

    def sdk_after_destroy() -> None:
        connected = SandboxSync.connect(
            sandbox.ref.external_id,
            connection_config=_config(fake, server_proxy),
            skip_health_check=True,
        )
        connected.get_endpoint(port)

    with pytest.raises(SandboxException):
        await asyncio.to_thread(sdk_after_destroy)


async def test_a_port_out_of_range_or_of_the_control_plane_is_refused(
    make_provider: Any,
) -> None:
    """Port 0, 65536 and execd's and the egress sidecar's ports are InvalidInput."""
    provider = make_provider()
    sandbox = await provider.create("exposed-refused", SandboxSpec(timeout=60))
    for port in (0, 65536, EXECD_PORT, EGRESS_PORT):
        with pytest.raises(InvalidInput):
            await sandbox.expose_port(port)
    await sandbox.destroy()
