"""Kit additions for remote providers: pinned dialling, expected statuses, process-group kills."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from aiohttp import web

from mango.domain.errors import InvalidInput
from mango.fakes import FakeService
from mango.provider.http import ApiClient, PinnedTransport
from mango.provider.shell import command_line, kill_tree_line


def _routes(service: FakeService) -> list[web.RouteDef]:
    async def host(request: web.Request) -> web.Response:
        return web.json_response({"host": request.host})

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"code": "not_found"}, status=404)

    return [web.get("/host", host), web.get("/missing", missing)]


async def test_pinned_transport_dials_the_node_and_keeps_the_virtual_host(tmp_path: Path) -> None:
    """Requests for a virtual host reach the pinned address with that host in ``Host``."""
    async with FakeService(tmp_path, _routes) as service:
        port = int(service.url.rsplit(":", 1)[1])
        client = ApiClient(
            "http://49983-sbx.cube.example:8080", transport=PinnedTransport("127.0.0.1", port)
        )
        try:
            response = await client.request("GET", "/host", operation="probe")
            assert response.json() == {"host": "49983-sbx.cube.example:8080"}
        finally:
            await client.aclose()
    with pytest.raises(InvalidInput):
        PinnedTransport("127.0.0.1", 0)
    with pytest.raises(InvalidInput):
        PinnedTransport("127.0.0.1", 80, scheme="ftp")


async def test_expected_statuses_are_answers_not_retried_errors(tmp_path: Path) -> None:
    """A listed status comes back as the response, once; unlisted it would be mapped."""
    async with FakeService(tmp_path, _routes) as service:
        client = ApiClient(service.url)
        try:
            response = await client.request("GET", "/missing", operation="stat", expected=(404,))
            assert response.status_code == 404
            async with client.stream(
                "GET", "/missing", operation="read", expected=(404,)
            ) as streamed:
                assert streamed.status_code == 404
            assert service.faults.count("GET", "/missing") == 2
        finally:
            await client.aclose()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


async def test_new_session_line_and_kill_tree_line_end_the_whole_tree() -> None:
    """The program leads its own session; one kill line ends it and its background child."""
    line = command_line(
        ["sh", "-c", 'sleep 300 & printf "%s\\n" "$!"; cat /proc/$$/stat; wait'],
        new_session=True,
    )
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", line, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    child = int(await process.stdout.readline())
    stat = (await process.stdout.readline()).decode()
    fields = stat.rsplit(")", 1)[1].split()
    assert int(fields[3]) == process.pid  # the session id (field 6) is the program's pid
    killer = await asyncio.create_subprocess_exec("sh", "-c", kill_tree_line(process.pid))
    assert await killer.wait() == 0
    await asyncio.wait_for(process.wait(), 10)
    # A reparented pid has no event to wait on: poll it, bounded.
    async with asyncio.timeout(10):
        while not _gone(child):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, 9)
    with pytest.raises(InvalidInput):
        kill_tree_line(1)
