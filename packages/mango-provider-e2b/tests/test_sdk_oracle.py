"""The official ``e2b`` SDK drives the fake: if the SDK and mango disagree, the fake is wrong.

The SDK (``e2b<3``, a test-only dependency) is pointed at the fake with its
own settings (``E2B_API_URL``, ``E2B_SANDBOX_URL``, ``E2B_API_KEY``), so both
planes go to 127.0.0.1 and envd calls are routed by ``E2b-Sandbox-Id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Mapping

import httpx
import pytest
from e2b import AsyncSandbox, CommandExitException, SandboxQuery

from mango.provider import Capability, Command, InvalidInput, PermanentError, SandboxNotFound
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.fake import E2BFakeService

from .conftest import SPEC, make_provider

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def sdk_env(fake: E2BFakeService, monkeypatch: pytest.MonkeyPatch) -> E2BFakeService:
    """Point the SDK at the fake through its documented environment variables."""
    monkeypatch.setenv("E2B_API_URL", fake.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", fake.url)
    monkeypatch.setenv("E2B_API_KEY", fake.config.api_key or "")
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    return fake


async def test_sdk_lifecycle_against_the_fake(sdk_env: E2BFakeService) -> None:
    """Create with metadata, list by metadata, connect, commands, files and kill via the SDK."""
    sandbox = await AsyncSandbox.create(template="base", metadata={"who": "sdk", "run": "1"})
    try:
        assert sdk_env.state(sandbox.sandbox_id) == "running"

        listed = await AsyncSandbox.list(query=SandboxQuery(metadata={"who": "sdk"})).next_items()
        assert [info.sandbox_id for info in listed] == [sandbox.sandbox_id]
        assert listed[0].metadata == {"who": "sdk", "run": "1"}
        none = await AsyncSandbox.list(query=SandboxQuery(metadata={"who": "other"})).next_items()
        assert none == []

        again = await AsyncSandbox.connect(sandbox.sandbox_id)
        result = await again.commands.run("echo hello; echo oops >&2")
        assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "oops\n", 0)

        with pytest.raises(CommandExitException) as failed:
            await sandbox.commands.run("printf partial; exit 7")
        assert failed.value.exit_code == 7
        assert failed.value.stdout == "partial"

        handle = await sandbox.commands.run("cat", background=True, stdin=True)
        await sandbox.commands.send_stdin(handle.pid, "fed through stdin")
        await sandbox.commands.close_stdin(handle.pid)
        fed = await handle.wait()
        assert fed.stdout == "fed through stdin"

        await sandbox.files.write("/workspace/sdk/note.txt", "written by the SDK")
        assert await sandbox.files.read("/workspace/sdk/note.txt") == "written by the SDK"
        assert (await sandbox.commands.run("cat /workspace/sdk/note.txt")).stdout == (
            "written by the SDK"
        )
        assert await sandbox.files.exists("/workspace/sdk/note.txt")
        info = await sandbox.files.get_info("/workspace/sdk/note.txt")
        assert info.size == len("written by the SDK")
    finally:
        assert await sandbox.kill()
    assert sdk_env.state(sandbox.sandbox_id) == "deleted"
    assert await AsyncSandbox.list(query=SandboxQuery(metadata={"who": "sdk"})).next_items() == []


async def test_sdk_and_mango_see_the_same_sandbox(
    sdk_env: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """What mango writes the SDK reads, and the other way round; the SDK lists mango's labels."""
    mine = await provider.create(session_key, SPEC)
    try:
        await mine.write_file("shared/from-mango.bin", b"mango\x00bytes")
        theirs = await AsyncSandbox.connect(mine.ref.external_id)
        data = await theirs.files.read("/workspace/shared/from-mango.bin", format="bytes")
        assert bytes(data) == b"mango\x00bytes"
        await theirs.files.write("/workspace/shared/from-sdk.txt", "sdk")
        assert await mine.read_file("shared/from-sdk.txt") == b"sdk"
        labels = provider.ownership.labels(session_key)
        listed = await AsyncSandbox.list(query=SandboxQuery(metadata=labels)).next_items()
        assert [info.sandbox_id for info in listed] == [mine.ref.external_id]
        result = await mine.exec(Command(("sh", "-c", "cat shared/from-sdk.txt; exit 4")))
        assert (result.stdout, result.exit_code) == (b"sdk", 4)
    finally:
        await mine.destroy()


async def test_sdk_is_refused_without_the_key(
    fake: E2BFakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong API key is an authentication error for the SDK too."""
    from e2b import AuthenticationException

    monkeypatch.setenv("E2B_API_URL", fake.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", fake.url)
    monkeypatch.setenv("E2B_API_KEY", "not-the-key")
    with pytest.raises(AuthenticationException):
        await AsyncSandbox.create(template="base")


async def test_sdk_drives_the_process_service(sdk_env: E2BFakeService) -> None:
    """Connect gets only the output written after it; List shows tags; SendSignal kills."""
    import asyncio

    from e2b import SandboxException

    sandbox = await AsyncSandbox.create(template="base")
    try:
        before = asyncio.Event()
        script = 'printf before; read -r x; printf "after %s" "$x"'
        handle = await sandbox.commands.run(
            script, background=True, stdin=True, on_stdout=lambda _text: before.set()
        )
        await asyncio.wait_for(before.wait(), 20)
        await handle.disconnect()
        again = await sandbox.commands.connect(handle.pid)
        assert again.pid == handle.pid
        await sandbox.commands.send_stdin(handle.pid, "abc\n")
        result = await again.wait()
        assert (result.stdout, result.exit_code) == ("after abc", 0)  # envd replays nothing
        with pytest.raises(SandboxException):
            await sandbox.commands.connect(handle.pid)  # not running any more: not_found

        sleeper = await sandbox.commands.run("sleep 60", background=True)
        listed = {process.pid: process for process in await sandbox.commands.list()}
        assert sleeper.pid in listed
        assert handle.pid not in listed
        assert listed[sleeper.pid].cmd == "/bin/bash"
        assert await sandbox.commands.kill(sleeper.pid)
        with pytest.raises(CommandExitException) as killed:
            await sleeper.wait()
        assert killed.value.error == "signal: killed"
        assert not await sandbox.commands.kill(sleeper.pid)  # gone: not_found, False
    finally:
        await sandbox.kill()


async def test_sdk_lists_mangos_background_processes_by_tag(
    sdk_env: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """mango's process runs under envd with its id as the tag; the SDK connects to it by pid."""
    mine = await provider.create(session_key, SPEC)
    try:
        started = await mine.start(Command(("sh", "-c", "exec cat")))
        theirs = await AsyncSandbox.connect(mine.ref.external_id)
        tagged = [p for p in await theirs.commands.list() if p.tag == started.id]
        assert [p.pid for p in tagged] == [started.pid]
        watching = await theirs.commands.connect(started.pid)
        await mine.kill(started.id)
        with pytest.raises(CommandExitException):
            await watching.wait()
        assert [p for p in await theirs.commands.list() if p.tag == started.id] == []
    finally:
        await mine.destroy()


async def test_sdk_drives_the_filesystem_service(
    sdk_env: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """ListDir, Stat, Move, Remove and MakeDir answer the SDK as envd does; mango agrees."""
    from e2b import FileType, InvalidArgumentException, NotFoundException, SandboxException

    mine = await provider.create(session_key, SPEC)
    try:
        layout = (
            "mkdir -p t/sub/deep && printf 12345 > t/a.txt && printf b > t/b && "
            "ln -s a.txt t/link && ln -s gone t/dangling && printf x > t/sub/deep/x"
        )
        laid = await mine.exec(Command(("sh", "-c", layout)))
        assert laid.exit_code == 0, laid.stderr
        sdk = await AsyncSandbox.connect(mine.ref.external_id)
        listed = await sdk.files.list("/workspace/t")
        # The SDK skips entries of no type: a dangling link (envd: FILE_TYPE_UNSPECIFIED).
        assert [entry.name for entry in listed] == ["a.txt", "b", "link", "sub"]
        by_name = {entry.name: entry for entry in listed}
        # envd reports a link with its target's type, and the target itself.
        assert by_name["link"].type == FileType.FILE
        assert by_name["link"].symlink_target == "/workspace/t/a.txt"
        assert by_name["link"].size == len("a.txt")
        dangling = await sdk.files.get_info("/workspace/t/dangling")
        assert dangling.type is None
        assert dangling.symlink_target == "/workspace/t/dangling"
        assert by_name["sub"].type == FileType.DIR
        assert by_name["a.txt"].symlink_target is None
        assert by_name["a.txt"].path == "/workspace/t/a.txt"
        deep = await sdk.files.list("/workspace/t", depth=3)
        assert [entry.path for entry in deep][-3:] == [
            "/workspace/t/sub",
            "/workspace/t/sub/deep",
            "/workspace/t/sub/deep/x",
        ]
        info = await sdk.files.get_info("/workspace/t/link")
        assert (info.type, info.symlink_target) == (FileType.FILE, "/workspace/t/a.txt")
        with pytest.raises(InvalidArgumentException):
            await sdk.files.list("/workspace/t/a.txt")
        with pytest.raises(SandboxException, match="not a directory"):  # internal, not not_found
            await sdk.files.get_info("/workspace/t/a.txt/below")
        with pytest.raises(PermanentError, match="not a directory"):  # mango: the file above
            await mine.stat("t/a.txt/below")
        with pytest.raises(NotFoundException):
            await sdk.files.list("/workspace/t/missing")
        assert await sdk.files.make_dir("/workspace/t/sub") is False  # already_exists
        with pytest.raises(InvalidArgumentException):  # "exists but it is not a directory"
            await sdk.files.make_dir("/workspace/t/a.txt")
        assert await sdk.files.make_dir("/workspace/t/new/deeper") is True  # parents made
        # envd's Move overwrites and makes the destination's parents; mango refuses to.
        moved = await sdk.files.rename("/workspace/t/b", "/workspace/t/a.txt")
        assert moved.path == "/workspace/t/a.txt"
        assert await mine.read_file("t/a.txt") == b"b"
        await sdk.files.rename("/workspace/t/a.txt", "/workspace/t/made/by/move")
        assert await mine.read_file("t/made/by/move") == b"b"
        with pytest.raises(NotFoundException):
            await sdk.files.rename("/workspace/t/nothing", "/workspace/t/x")
        # envd's Remove is RemoveAll: recursive, and a missing path is no error.
        await sdk.files.remove("/workspace/t/sub")
        await sdk.files.remove("/workspace/t/nothing")
        assert not await sdk.files.exists("/workspace/t/sub")

        seen = await mine.list_dir("t", recursive=True)
        assert {entry.path: entry.kind.value for entry in seen.entries} == {
            "t/dangling": "symlink",
            "t/link": "symlink",
            "t/made": "directory",
            "t/made/by": "directory",
            "t/made/by/move": "file",
            "t/new": "directory",
            "t/new/deeper": "directory",
        }
    finally:
        await mine.destroy()


async def test_sdk_pauses_and_resumes_the_fake(sdk_env: E2BFakeService) -> None:
    """``POST /sandboxes/{id}/pause`` as the SDK sends it (``{"memory": true}``): 204, then
    ``paused``, a second pause is the 409 (``False``); ``connect`` resumes; a background
    command's stream, cut by the pause, is taken up with ``commands.connect`` after it."""
    sandbox = await AsyncSandbox.create(template="base")
    try:
        await sandbox.files.write("/workspace/kept.txt", "kept")
        handle = await sandbox.commands.run(
            "while [ ! -e /workspace/go ]; do sleep 0.01; done; echo done", background=True
        )
        assert await sandbox.pause() is True
        assert sdk_env.state(sandbox.sandbox_id) == "paused"
        assert (await sandbox.get_info()).state.value == "paused"
        assert await sandbox.pause() is False  # already paused: the 409
        resumed = await AsyncSandbox.connect(sandbox.sandbox_id)
        assert sdk_env.state(sandbox.sandbox_id) == "running"
        taken_up = await resumed.commands.connect(handle.pid)
        await resumed.files.write("/workspace/go", "")
        finished = await taken_up.wait()
        assert (finished.exit_code, finished.stdout) == (0, "done\n")
        assert await resumed.files.read("/workspace/kept.txt") == "kept"
    finally:
        await AsyncSandbox.kill(sandbox.sandbox_id)


SERVE_PORT_SCRIPT = 'cd /workspace && exec python3 -m http.server "$1" --bind 127.0.0.1'


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


async def test_a_port_of_an_sdk_sandbox_is_routed_by_the_client_proxy_headers(
    sdk_env: E2BFakeService,
) -> None:
    """A server the SDK starts answers on the shared sandbox URL with E2b-Sandbox-Id and
    E2b-Sandbox-Port, the headers the SDK itself routes envd with; a killed sandbox's is 502."""
    port = _free_port()
    sandbox = await AsyncSandbox.create(template="base")
    token = secrets.token_hex(8)
    try:
        await sandbox.files.write("/workspace/index.html", token)
        await sandbox.commands.run(f"sh -c '{SERVE_PORT_SCRIPT}' sh {port}", background=True)
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(port)}
        answer = await _answer(f"{sdk_env.url}/index.html", headers)
        assert (answer.status_code, answer.text) == (200, token)
        assert sandbox.get_host(port).startswith(f"{port}-{sandbox.sandbox_id}.")
    finally:
        assert await sandbox.kill()
    gone = await _answer(f"{sdk_env.url}/index.html", headers, bound=0)
    assert gone.status_code == 502


async def test_mango_exposes_what_the_sdk_addresses(
    sdk_env: E2BFakeService,
    provider: E2BProvider,
    session_key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """expose_port: the shared URL and the routing headers (a server mango started answers);
    without a shared URL, the SDK's get_host; after a kill, SandboxNotFound; envd's port and
    port 0 are InvalidInput."""
    port = _free_port()
    sandbox = await provider.create(session_key, SPEC)
    token = secrets.token_hex(8)
    await sandbox.write_file("index.html", token.encode())
    server = asyncio.create_task(
        sandbox.exec(Command(("sh", "-c", SERVE_PORT_SCRIPT, "sh", str(port))))
    )
    try:
        exposed = await sandbox.expose_port(port)
        assert exposed.url == sdk_env.url
        assert dict(exposed.headers) == {
            "E2b-Sandbox-Id": sandbox.ref.external_id,
            "E2b-Sandbox-Port": str(port),
        }
        answer = await _answer(f"{exposed.url}/index.html", exposed.headers)
        assert (answer.status_code, answer.text) == (200, token)
        hosted = make_provider(sdk_env, shared_envd_url=None)
        try:
            attached = await hosted.attach(session_key, sandbox.ref, SPEC)
            by_host = await attached.expose_port(port)
        finally:
            await hosted.aclose()
        monkeypatch.setenv("E2B_DOMAIN", sdk_env.config.domain)  # the fake's, as mango's
        theirs = await AsyncSandbox.connect(sandbox.ref.external_id)
        assert by_host.url == f"http://{theirs.get_host(port)}"
        assert dict(by_host.headers) == {}
        for refused in (0, 65536, 49983):
            with pytest.raises(InvalidInput):
                await sandbox.expose_port(refused)
    finally:
        server.cancel()
        with contextlib.suppress(BaseException):
            await server
    await sandbox.destroy()
    with pytest.raises(SandboxNotFound):
        await sandbox.expose_port(port)


async def test_cube_declares_no_exposed_ports(cube_fake: E2BFakeService, session_key: str) -> None:
    """Cube's proxy is reached by virtual host through a proxy node: no port is exposed."""
    cube = make_provider(cube_fake)
    try:
        assert Capability.EXPOSED_PORTS not in cube.capabilities
        sandbox = await cube.create(session_key, SPEC)
        with pytest.raises(PermanentError, match="exposed-ports"):
            await sandbox.expose_port(8080)
        await sandbox.destroy()
    finally:
        await cube.aclose()
