"""The fake Daytona driven by the official SDK (``daytona``, a test-only dependency).

The fake is only worth something if it speaks Daytona's protocol: these
tests use the SDK exactly as a Daytona user would, against the fake on
127.0.0.1, for the calls mango relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator, Mapping

import httpx
import pytest
from daytona import AsyncDaytona, DaytonaConfig, DaytonaError

from mango.fakes import FakeService
from mango.provider import Command, InvalidInput, SandboxNotFound, SandboxSpec
from mango_provider_daytona.fake import FAKE_API_KEY, DaytonaFake

from .conftest import make_provider


@pytest.fixture
async def client(service: FakeService) -> AsyncIterator[AsyncDaytona]:
    """The SDK's async client, pointed at the fake."""
    async with AsyncDaytona(DaytonaConfig(api_key=FAKE_API_KEY, api_url=service.url)) as sdk:
        yield sdk


async def test_sdk_lifecycle_create_get_stop_start_delete(
    client: AsyncDaytona, service: FakeService
) -> None:
    """create, get by id and by name, stop, start and delete work through the SDK."""
    sandbox = await client.create(timeout=30)
    assert sandbox.state == "started"
    assert (await client.get(sandbox.id)).id == sandbox.id
    assert (await client.get(sandbox.name)).id == sandbox.id
    await sandbox.stop()
    assert sandbox.state == "stopped"
    await sandbox.start()
    assert sandbox.state == "started"
    await client.delete(sandbox)
    with pytest.raises(DaytonaError):
        await client.get(sandbox.id)
    assert service.faults.count("DELETE", "/sandbox/{id}") == 1


async def test_sdk_labels_and_list(client: AsyncDaytona) -> None:
    """Labels set at create come back on the sandbox and select it in a list."""
    from daytona import CreateSandboxFromSnapshotParams, ListSandboxesQuery

    params = CreateSandboxFromSnapshotParams(labels={"io.mango.test": "oracle"})
    sandbox = await client.create(params, timeout=30)
    assert sandbox.labels["io.mango.test"] == "oracle"
    query = ListSandboxesQuery(labels={"io.mango.test": "oracle"})
    listed = [item.id async for item in client.list(query)]
    assert listed == [sandbox.id]
    await client.delete(sandbox)


async def test_sdk_commands_with_exit_codes(client: AsyncDaytona) -> None:
    """process.exec runs a shell line: output (stdout and stderr merged) and exit codes."""
    sandbox = await client.create(timeout=30)
    response = await sandbox.process.exec("printf out; printf err >&2; exit 7")
    assert (response.exit_code, response.result) == (7, "outerr")
    response = await sandbox.process.exec("echo $((6 * 7))")
    assert (response.exit_code, response.result) == (0, "42\n")
    await client.delete(sandbox)


async def test_sdk_exec_timeout_is_an_error(client: AsyncDaytona) -> None:
    """A command past its timeout is killed by the daemon and reported as an error (408)."""
    sandbox = await client.create(timeout=30)
    with pytest.raises(DaytonaError):
        await sandbox.process.exec("sleep 30", timeout=1)
    response = await sandbox.process.exec("printf alive")
    assert response.result == "alive"
    await client.delete(sandbox)


async def test_sdk_command_cut_short_by_a_delete_is_an_error(
    client: AsyncDaytona, service: FakeService
) -> None:
    """A sandbox deleted while process.exec runs: the SDK gets an error (a bare 502), no result."""
    sandbox = await client.create(timeout=30)
    async with service.sandboxes.get(sandbox.id).beacon("started") as started:
        command = "echo up > started; sleep 30"
        running = asyncio.ensure_future(sandbox.process.exec(command, timeout=60))
        await started.wait(30)  # the command runs (TimeoutError naming the beacon if not)
    await client.delete(sandbox)
    with pytest.raises(DaytonaError) as caught:
        await asyncio.wait_for(running, 10)
    assert caught.value.status_code == 502


async def test_sdk_file_write_and_read(client: AsyncDaytona) -> None:
    """fs.upload_file and fs.download_file round-trip binary bytes; a missing file is an error."""
    sandbox = await client.create(timeout=30)
    payload = bytes(range(256)) * 40
    await sandbox.fs.upload_file(payload, "data/blob.bin")
    assert await sandbox.fs.download_file("data/blob.bin") == payload
    home = await sandbox.get_user_home_dir()
    assert home is not None
    await sandbox.fs.upload_file(b"absolute", f"{home}/abs.txt")
    assert await sandbox.fs.download_file("abs.txt") == b"absolute"
    info = await sandbox.fs.get_file_info("data/blob.bin")
    assert (info.size, info.is_dir) == (len(payload), False)
    with pytest.raises(DaytonaError):
        await sandbox.fs.download_file("data/missing.bin")
    await sandbox.fs.create_folder("made/here", "755")
    assert (await sandbox.fs.get_file_info("made/here")).is_dir
    await client.delete(sandbox)


async def test_sdk_sees_what_mango_made(client: AsyncDaytona, service: FakeService) -> None:
    """A sandbox mango created is an ordinary sandbox to the SDK, labels and files included."""
    from mango.provider import SandboxSpec

    from .conftest import make_provider

    provider = make_provider(service)
    try:
        made = await provider.create("sdk-oracle", SandboxSpec())
        await made.write_file("from-mango.txt", b"hello")
        sandbox = await client.get(made.ref.external_id)
        assert sandbox.name == provider.ownership.name("sdk-oracle")
        assert sandbox.labels["io.mango.managed"] == "true"
        assert await sandbox.fs.download_file("from-mango.txt") == b"hello"
        await made.destroy()
    finally:
        await provider.aclose()


def test_fake_is_a_daytona_fake(fake: DaytonaFake) -> None:
    """The fixture's fake accepts the key the SDK was given."""
    assert fake.api_key == FAKE_API_KEY


async def test_sdk_session_commands(client: AsyncDaytona, service: FakeService) -> None:
    """Sessions: create, a sync and an async command, its status and logs, list, delete."""
    from daytona import SessionExecuteRequest

    sandbox = await client.create(timeout=30)
    await sandbox.process.create_session("work")
    with pytest.raises(DaytonaError):
        await sandbox.process.create_session("work")  # 409: the id is taken
    done = await sandbox.process.execute_session_command(
        "work", SessionExecuteRequest(command="export KEPT=yes; echo sync; (exit 3)")
    )
    assert (done.exit_code, done.output) == (3, "sync\n")
    record = service.sandboxes.get(sandbox.id)
    async with record.beacon("started") as started:
        line = 'echo "async $KEPT"; echo up > started; while [ ! -e go ]; do sleep 0.05; done'
        handed = await sandbox.process.execute_session_command(
            "work", SessionExecuteRequest(command=line, run_async=True)
        )
        await started.wait(20)
        running = await sandbox.process.get_session_command("work", handed.cmd_id)
        assert running.exit_code is None  # still running: no exitCode
        await sandbox.fs.upload_file(b"", "go")
    for _ in range(400):
        status = await sandbox.process.get_session_command("work", handed.cmd_id)
        if status.exit_code is not None:
            break
        await asyncio.sleep(0.05)
    assert status.exit_code == 0
    logs = await sandbox.process.get_session_command_logs("work", handed.cmd_id)
    assert logs.output == "async yes\n"  # the session's shell kept KEPT
    listed = {session.session_id: session for session in await sandbox.process.list_sessions()}
    assert [c.id for c in listed["work"].commands or []] == [done.cmd_id, handed.cmd_id]
    await sandbox.process.delete_session("work")
    with pytest.raises(DaytonaError):
        await sandbox.process.get_session("work")
    await client.delete(sandbox)


async def test_sdk_search_move_and_delete(client: AsyncDaytona) -> None:
    """fs.search_files walks the tree with lstat; move_files and delete_file answer as the
    daemon does (its os.Stat follows links: a dangling one is "not found")."""
    from daytona import DaytonaNotFoundError

    sandbox = await client.create(timeout=30)
    home = await sandbox.get_user_home_dir()
    laid = await sandbox.process.exec(
        "mkdir -p t/sub/deep t/full && printf a > t/a && printf b > t/b && "
        "printf f > t/full/f && ln -s a t/link && ln -s gone t/dangling && "
        "ln -s sub t/dirlink && printf x > t/sub/deep/x"
    )
    assert laid.exit_code == 0, laid.result
    found = await sandbox.fs.search_files(f"{home}/t", "*")
    assert found.files == [
        f"{home}/t",
        *(
            f"{home}/t/{name}"
            for name in (
                "a",
                "b",
                "dangling",
                "dirlink",  # listed, never walked into
                "full",
                "full/f",
                "link",
                "sub",
                "sub/deep",
                "sub/deep/x",
            )
        ),
    ]
    assert (await sandbox.fs.search_files(f"{home}/t", "d*")).files == [
        f"{home}/t/dangling",
        f"{home}/t/dirlink",
        f"{home}/t/sub/deep",
    ]
    with pytest.raises(DaytonaError, match="already exists"):
        await sandbox.fs.move_files("t/b", "t/a")  # the daemon refuses (409) what resolves
    with pytest.raises(DaytonaNotFoundError):
        await sandbox.fs.move_files("t/dangling", "t/moved")
    with pytest.raises(DaytonaNotFoundError):
        await sandbox.fs.move_files("t/b", "t/no/parent")
    await sandbox.fs.move_files("t/b", "t/sub/b2")
    with pytest.raises(DaytonaError, match="recursive"):
        await sandbox.fs.delete_file("t/full")
    with pytest.raises(DaytonaNotFoundError):
        await sandbox.fs.delete_file("t/dangling")
    await sandbox.fs.delete_file("t/dirlink", recursive=True)  # RemoveAll: the link itself
    await sandbox.fs.delete_file("t/full", recursive=True)
    await sandbox.fs.delete_file("t/link")
    shown = await sandbox.process.exec("ls -A t t/sub")
    assert shown.result.split() == ["t:", "a", "dangling", "sub", "t/sub:", "b2", "deep"]
    await client.delete(sandbox)


SERVE_PORT_SCRIPT = 'exec python3 -m http.server "$1" --bind 127.0.0.1'


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _answer(url: str, headers: Mapping[str, str], *, bound: float = 20.0) -> httpx.Response:
    """GET ``url`` until the sandbox's server answers it (it may not listen yet), at most
    ``bound`` seconds; the last answer, or the last transport error raised."""
    deadline = asyncio.get_running_loop().time() + bound
    async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
        while True:
            try:
                response = await http.get(url, headers=dict(headers))
            except httpx.TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            else:
                if response.status_code == 200 or asyncio.get_running_loop().time() > deadline:
                    return response
            await asyncio.sleep(0.05)  # a bounded poll of the server's start, never asserted


async def test_sdk_preview_link_reaches_what_mango_exposes(
    client: AsyncDaytona, service: FakeService
) -> None:
    """get_preview_link answers what expose_port does (URL, token in X-Daytona-Preview-Token),
    and a server in the sandbox answers through it: with the token, not without it, not with
    another sandbox's; a deleted sandbox's port is SandboxNotFound."""
    port = _free_port()
    provider = make_provider(service)
    sandbox = await provider.create("preview", SandboxSpec(timeout=60))
    other = await provider.create("preview-other", SandboxSpec(timeout=60))
    token = secrets.token_hex(8)
    await sandbox.write_file("index.html", token.encode())
    server = asyncio.create_task(
        sandbox.exec(Command(("sh", "-c", SERVE_PORT_SCRIPT, "sh", str(port))))
    )
    try:
        exposed = await sandbox.expose_port(port)
        link = await (await client.get(sandbox.ref.external_id)).get_preview_link(port)
        assert exposed.url == link.url
        assert dict(exposed.headers) == {"X-Daytona-Preview-Token": link.token}
        assert link.token not in exposed.url
        assert link.token not in repr(exposed)
        answer = await _answer(f"{link.url}/index.html", {"X-Daytona-Preview-Token": link.token})
        assert (answer.status_code, answer.text) == (200, token)
        assert (await _answer(f"{link.url}/index.html", {}, bound=0)).status_code == 401
        stranger = dict((await other.expose_port(port)).headers)
        assert (await _answer(f"{link.url}/index.html", stranger, bound=0)).status_code == 401
    finally:
        server.cancel()
        with contextlib.suppress(BaseException):
            await server
    for made in (sandbox, other):
        await made.destroy()
    with pytest.raises(SandboxNotFound):
        await sandbox.expose_port(port)
    with pytest.raises(DaytonaError):
        await (await client.get(sandbox.ref.external_id)).get_preview_link(port)
    with pytest.raises(InvalidInput):
        await other.expose_port(0)
    await provider.aclose()
