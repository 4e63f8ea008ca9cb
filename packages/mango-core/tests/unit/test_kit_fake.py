"""The fake-service scaffold, exercised through a tiny demo vendor over real HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from mango.fakes import FakeService, SandboxPaused, SandboxState
from mango.provider import Command, ExecResult, OutputChunk, SandboxNotFound

TOKEN = "demo-token-123"  # noqa: S105 -- the demo vendor's test credential

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def demo_routes(service: FakeService) -> list[web.RouteDef]:
    """A toy vendor: bearer auth, create/list/get/delete, pause/resume, exec, files."""
    sandboxes = service.sandboxes

    def vendor(handler: Handler) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                return web.json_response({"error": "unauthorized"}, status=401)
            try:
                return await handler(request)
            except SandboxNotFound:
                return web.json_response({"error": "sandbox not found"}, status=404)
            except SandboxPaused:
                return web.json_response({"error": "sandbox is paused"}, status=409)
            except FileNotFoundError:
                return web.json_response({"error": "file not found"}, status=404)

        return wrapped

    def describe(sandbox_id: str) -> dict[str, object]:
        record = sandboxes.get(sandbox_id)
        return {
            "id": record.id,
            "state": str(record.state),
            "metadata": record.metadata,
            "created": record.created_at.isoformat(),
        }

    async def create(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        record = await sandboxes.create(body.get("metadata", {}))
        return web.json_response(describe(record.id), status=201)

    async def list_(request: web.Request) -> web.StreamResponse:
        wanted = dict(item.split("=", 1) for item in request.query.getall("label", []))
        return web.json_response([describe(r.id) for r in sandboxes.list(wanted)])

    async def get(request: web.Request) -> web.StreamResponse:
        return web.json_response(describe(request.match_info["id"]))

    async def delete(request: web.Request) -> web.StreamResponse:
        if not await sandboxes.delete(request.match_info["id"]):
            raise SandboxNotFound("gone")
        return web.Response(status=204)

    async def pause(request: web.Request) -> web.StreamResponse:
        sandboxes.pause(request.match_info["id"])
        return web.Response(status=204)

    async def resume(request: web.Request) -> web.StreamResponse:
        sandboxes.resume(request.match_info["id"])
        return web.Response(status=204)

    def command(body: dict[str, object]) -> Command:
        return Command(
            argv=tuple(body["argv"]),  # type: ignore[arg-type]
            stdin=base64.b64decode(str(body.get("stdin", ""))),
            timeout=body.get("timeout"),  # type: ignore[arg-type]
        )

    async def exec_(request: web.Request) -> web.StreamResponse:
        result = await sandboxes.exec(request.match_info["id"], command(await request.json()))
        return web.json_response(
            {
                "exit_code": result.exit_code,
                "stdout": base64.b64encode(result.stdout).decode(),
                "stderr": base64.b64encode(result.stderr).decode(),
                "timed_out": result.timed_out,
                "cancelled": result.cancelled,
            }
        )

    async def exec_stream(request: web.Request) -> web.StreamResponse:
        cmd = command(await request.json())
        async with sandboxes.exec_stream(request.match_info["id"], cmd) as events:
            response = web.StreamResponse()
            response.content_type = "application/x-ndjson"
            await response.prepare(request)
            async for event in events:
                line: dict[str, object]
                if isinstance(event, OutputChunk):
                    line = {"stream": str(event.stream), "data": event.data.decode()}
                else:
                    assert isinstance(event, ExecResult)
                    line = {"exit_code": event.exit_code}
                await response.write(json.dumps(line).encode() + b"\n")
        await response.write_eof()
        return response

    async def put_file(request: web.Request) -> web.StreamResponse:
        data = bytearray()
        async for chunk in request.content.iter_any():
            data += chunk
        await sandboxes.write_file(
            request.match_info["id"], request.match_info["path"], bytes(data)
        )
        return web.Response(status=204)

    async def get_file(request: web.Request) -> web.StreamResponse:
        data = await sandboxes.read_file(request.match_info["id"], request.match_info["path"])
        return web.Response(body=data)

    return [
        web.post("/sandboxes", vendor(create)),
        web.get("/sandboxes", vendor(list_)),
        web.get("/sandboxes/{id}", vendor(get)),
        web.delete("/sandboxes/{id}", vendor(delete)),
        web.post("/sandboxes/{id}/pause", vendor(pause)),
        web.post("/sandboxes/{id}/resume", vendor(resume)),
        web.post("/sandboxes/{id}/exec", vendor(exec_)),
        web.post("/sandboxes/{id}/exec-stream", vendor(exec_stream)),
        web.put("/sandboxes/{id}/files/{path:.+}", vendor(put_file)),
        web.get("/sandboxes/{id}/files/{path:.+}", vendor(get_file)),
    ]


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[FakeService]:
    """A running demo vendor fake."""
    async with FakeService(tmp_path, demo_routes, name="demo") as running:
        yield running


@pytest.fixture
async def client(service: FakeService) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client pointed at the demo vendor, with its token."""
    async with httpx.AsyncClient(
        base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as http:
        yield http


async def create(client: httpx.AsyncClient, **metadata: str) -> str:
    """Create a demo sandbox and return its id."""
    response = await client.post("/sandboxes", json={"metadata": metadata})
    assert response.status_code == 201
    sandbox_id: str = response.json()["id"]
    return sandbox_id


async def run(
    client: httpx.AsyncClient, sandbox_id: str, *argv: str, **extra: object
) -> httpx.Response:
    """POST an exec to the demo vendor."""
    return await client.post(f"/sandboxes/{sandbox_id}/exec", json={"argv": argv, **extra})


async def test_service_listens_on_loopback_and_needs_auth(service: FakeService) -> None:
    """The URL is an ephemeral 127.0.0.1 port; the vendor's auth rule applies."""
    assert service.url.startswith("http://127.0.0.1:")
    async with httpx.AsyncClient(base_url=service.url) as anonymous:
        assert (await anonymous.get("/sandboxes")).status_code == 401


async def test_create_list_get_delete(client: httpx.AsyncClient, service: FakeService) -> None:
    """Sandboxes are created with metadata, filtered by label, and deleted for good."""
    first = await create(client, owner="a")
    second = await create(client, owner="b")
    listed = (await client.get("/sandboxes", params={"label": "owner=a"})).json()
    assert [item["id"] for item in listed] == [first]
    got = (await client.get(f"/sandboxes/{second}")).json()
    assert (got["state"], got["metadata"]) == ("running", {"owner": "b"})
    assert (await client.delete(f"/sandboxes/{first}")).status_code == 204
    assert (await client.get(f"/sandboxes/{first}")).status_code == 404
    assert (await client.delete(f"/sandboxes/{first}")).status_code == 404
    record = service.sandboxes.find(first)
    assert record is not None
    assert record.state is SandboxState.DELETED
    assert not await asyncio.to_thread(Path(record.local.root).exists)


async def test_exec_runs_real_processes(client: httpx.AsyncClient) -> None:
    """Exit codes, stdin, stderr and timeouts come from real processes."""
    sandbox_id = await create(client)
    result = (
        await run(
            client,
            sandbox_id,
            "sh",
            "-c",
            "cat; echo err >&2; exit 7",
            stdin=base64.b64encode(b"hello\x00").decode(),
        )
    ).json()
    assert result["exit_code"] == 7
    assert base64.b64decode(result["stdout"]) == b"hello\x00"
    assert base64.b64decode(result["stderr"]) == b"err\n"
    timed = (await run(client, sandbox_id, "sleep", "30", timeout=0.3)).json()
    assert timed["timed_out"] is True


async def test_exec_stream_route_streams_events(client: httpx.AsyncClient) -> None:
    """A streaming route built on exec_stream delivers chunks, then the result."""
    sandbox_id = await create(client)
    async with client.stream(
        "POST",
        f"/sandboxes/{sandbox_id}/exec-stream",
        json={"argv": ["sh", "-c", "echo hi; exit 3"]},
    ) as response:
        lines = [json.loads(line) async for line in response.aiter_lines() if line]
    assert lines == [{"stream": "stdout", "data": "hi\n"}, {"exit_code": 3}]


async def test_files_round_trip_with_chunked_upload(client: httpx.AsyncClient) -> None:
    """A chunked request body is accepted; files are real files; a missing one is 404."""
    sandbox_id = await create(client)
    payload = os.urandom(3 << 20)

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 1 << 20):
            yield payload[start : start + (1 << 20)]

    put = await client.put(f"/sandboxes/{sandbox_id}/files/dir/blob.bin", content=body())
    assert put.status_code == 204
    assert (await client.get(f"/sandboxes/{sandbox_id}/files/dir/blob.bin")).content == payload
    listing = (await run(client, sandbox_id, "wc", "-c", "dir/blob.bin")).json()
    assert base64.b64decode(listing["stdout"]).split()[0] == str(len(payload)).encode()
    assert (await client.get(f"/sandboxes/{sandbox_id}/files/nope")).status_code == 404


async def test_fail_next_requests_then_recover(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """fail() answers the next N matching requests with the status, without the handler."""
    service.faults.fail(503, times=2, method="POST", path="/sandboxes", body="try later")
    first = await client.post("/sandboxes", json={})
    second = await client.post("/sandboxes", json={})
    assert (first.status_code, first.text, second.status_code) == (503, "try later", 503)
    assert service.sandboxes.list() == []
    assert (await client.get("/sandboxes")).status_code == 200
    await create(client)
    assert service.faults.count("POST", "/sandboxes") == 3
    assert len(service.sandboxes.list()) == 1


async def test_fail_matches_a_template_or_a_concrete_path(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """A rule on a concrete path leaves other sandboxes alone; a template rule hits all."""
    one, two = await create(client), await create(client)
    service.faults.fail(418, times=None, method="GET", path=f"/sandboxes/{one}")
    assert (await client.get(f"/sandboxes/{one}")).status_code == 418
    assert (await client.get(f"/sandboxes/{two}")).status_code == 200
    service.faults.clear()
    service.faults.fail(500, times=1, path="/sandboxes/{id}")
    assert (await client.get(f"/sandboxes/{two}")).status_code == 500
    assert (await client.get(f"/sandboxes/{two}")).status_code == 200
    assert service.faults.count(path="/sandboxes/{id}") == 4
    assert service.faults.count("POST", "/sandboxes/{id}/exec") == 0


async def test_delay_makes_the_client_time_out(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """delay() holds matching requests; an impatient client times out."""
    service.faults.delay(60, method="GET", path="/sandboxes")
    with pytest.raises(httpx.ReadTimeout):
        await client.get("/sandboxes", timeout=0.2)
    assert (await client.post("/sandboxes", json={})).status_code == 201


async def test_drop_after_commit_loses_the_response_not_the_action(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """drop_after_commit() performs the create, then closes without a response."""
    service.faults.drop_after_commit(method="POST", path="/sandboxes")
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/sandboxes", json={"metadata": {"k": "v"}})
    assert [record.metadata for record in service.sandboxes.list()] == [{"k": "v"}]
    assert (await client.post("/sandboxes", json={})).status_code == 201


async def test_delete_behind_the_back_kills_running_commands(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """A test-side delete kills the running command and the sandbox answers 404."""
    sandbox_id = await create(client)
    fifo = Path(service.sandboxes.get(sandbox_id).local.root) / "started"
    os.mkfifo(fifo)
    running = asyncio.create_task(
        run(client, sandbox_id, "sh", "-c", "echo up > started; exec sleep 60")
    )
    # Reading the FIFO returns once the command has written to it: it is running.
    async with asyncio.timeout(30):
        assert await asyncio.to_thread(fifo.read_bytes) == b"up\n"
    assert await service.sandboxes.delete(sandbox_id)
    result = (await running).json()
    assert result["cancelled"] is True
    assert (await client.get(f"/sandboxes/{sandbox_id}")).status_code == 404


async def test_pause_refuses_data_plane_calls_until_resume(
    client: httpx.AsyncClient, service: FakeService
) -> None:
    """A paused sandbox refuses exec and files the vendor's way; resume restores them."""
    sandbox_id = await create(client)
    service.sandboxes.pause(sandbox_id)
    assert (await client.get(f"/sandboxes/{sandbox_id}")).json()["state"] == "paused"
    assert (await run(client, sandbox_id, "true")).status_code == 409
    assert (await client.get(f"/sandboxes/{sandbox_id}/files/x")).status_code == 409
    assert (await client.post(f"/sandboxes/{sandbox_id}/resume")).status_code == 204
    assert (await run(client, sandbox_id, "true")).json()["exit_code"] == 0


async def test_stop_deletes_every_sandbox(tmp_path: Path) -> None:
    """Stopping the service kills and removes its sandboxes; the URL is then unusable."""
    service = FakeService(tmp_path, demo_routes)
    async with service:
        record = await service.sandboxes.create()
    assert record.state is SandboxState.DELETED
    assert not await asyncio.to_thread(Path(record.local.root).exists)
    with pytest.raises(Exception, match="not running"):
        _ = service.url


def test_standalone_runs_until_sigterm(tmp_path: Path) -> None:
    """python -m mango.fakes prints its URL, serves, and exits on SIGTERM."""
    (tmp_path / "demo_vendor_mod.py").write_text(
        textwrap.dedent(
            """
            from aiohttp import web

            def routes(service):
                async def hello(request):
                    return web.json_response({"name": service.name})
                return [web.get("/hello", hello)]
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mango.fakes",
            "demo_vendor_mod:routes",
            "--scratch",
            str(tmp_path / "scratch"),
            "--name",
            "standalone",
        ],
        stdout=subprocess.PIPE,
        env=env,
    ) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().decode().strip()
            assert url.startswith("http://127.0.0.1:")
            assert httpx.get(f"{url}/hello").json() == {"name": "standalone"}
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
