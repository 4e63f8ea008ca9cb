"""The kit's rules for bad answers, against the scaffold's hostile answers on 127.0.0.1.

Bounded bodies, an overall deadline per attempt, "not JSON" as a typed
:class:`ProtocolError`: the rules every remote provider gets from
:class:`~mango.provider.http.ApiClient` and :func:`~mango.provider.http.json_answer`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from mango.fakes import FakeService, Hostile
from mango.provider import ProtocolError, ProviderUnavailable, SandboxNotFound
from mango.provider.http import (
    ApiClient,
    RemoteUnavailable,
    RetryPolicy,
    json_answer,
    transfer_deadline,
)

FAST = RetryPolicy(attempts=3, timeout=20, wait_initial=0, wait_max=0, wait_jitter=0)
GUARD_SECONDS = 30.0
"""A liveness bound for calls that must end by themselves well before it (never a timing)."""


def document_routes(service: FakeService) -> list[web.RouteDef]:
    """One route answering a small JSON object (the faults replace it with bad answers)."""
    del service

    async def document(request: web.Request) -> web.StreamResponse:
        return web.json_response({"id": request.match_info["id"], "state": "running"})

    return [web.get("/sandboxes/{id}", document)]


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[FakeService]:
    """A running document server."""
    async with FakeService(tmp_path, document_routes, name="document") as running:
        yield running


@pytest.fixture
async def api(service: FakeService) -> AsyncIterator[ApiClient]:
    """A client with fast retries and a short overall deadline."""
    async with ApiClient(service.url, retry=FAST, timeout=10, deadline=2.0) as client:
        yield client


async def get(api: ApiClient) -> object:
    """``GET /sandboxes/sbx-1`` and its JSON object, as a control plane's get would."""
    response = await api.request(
        "GET", "/sandboxes/sbx-1", operation="get sandbox", sandbox_id="sbx-1"
    )
    return json_answer(response, operation="get sandbox", shape=dict)


async def test_a_good_answer_is_read_and_parsed(api: ApiClient) -> None:
    """The ordinary answer passes every bound."""
    assert await get(api) == {"id": "sbx-1", "state": "running"}


@pytest.mark.parametrize("answer", [Hostile.NOT_JSON, Hostile.TRUNCATED_JSON])
async def test_a_200_that_is_not_json_is_a_protocol_error(
    api: ApiClient, service: FakeService, answer: Hostile
) -> None:
    """A 200 that is not JSON is a ProtocolError naming the call; it is not retried in the call."""
    service.faults.hostile(answer, path="/sandboxes/{id}")
    with pytest.raises(ProtocolError, match="not JSON") as caught:
        await get(api)
    assert "get sandbox" in str(caught.value)
    assert not isinstance(caught.value, SandboxNotFound)
    assert isinstance(caught.value, ProviderUnavailable)  # retryable: the binding is kept
    assert not caught.value.permanent
    assert service.faults.count(path="/sandboxes/{id}") == 1


async def test_a_json_answer_of_the_wrong_shape_is_a_protocol_error(
    api: ApiClient, service: FakeService
) -> None:
    """A JSON array where an object was promised is a ProtocolError, not a TypeError later."""
    service.faults.fail(200, path="/sandboxes/{id}", body="[1, 2]")
    with pytest.raises(ProtocolError, match="not a JSON object"):
        await get(api)


async def test_an_html_500_page_is_unavailable_with_a_short_excerpt(
    api: ApiClient, service: FakeService
) -> None:
    """A proxy's HTML 500 page is retried, then RemoteUnavailable; never a loss."""
    service.faults.hostile(Hostile.HTML_500, path="/sandboxes/{id}", times=None)
    with pytest.raises(RemoteUnavailable) as caught:
        await get(api)
    assert caught.value.status == 500
    assert len(str(caught.value)) < 400
    assert service.faults.count(path="/sandboxes/{id}") == FAST.attempts


async def test_a_redirect_is_unavailable_and_not_followed(
    api: ApiClient, service: FakeService
) -> None:
    """A 302 to another host is never followed."""
    service.faults.hostile(Hostile.REDIRECT, path="/sandboxes/{id}", times=None)
    with pytest.raises(RemoteUnavailable, match="wrong base URL"):
        await get(api)


async def test_a_429_with_retry_after_is_waited_for(api: ApiClient, service: FakeService) -> None:
    """429 with Retry-After: 1 is retried after it, and the next answer is used."""
    service.faults.hostile(Hostile.RATE_LIMITED, path="/sandboxes/{id}")
    assert await get(api) == {"id": "sbx-1", "state": "running"}
    assert service.faults.count(path="/sandboxes/{id}") == 2


async def test_a_huge_answer_is_refused_with_memory_bounded(
    api: ApiClient, service: FakeService
) -> None:
    """A 64 MiB answer stops at the 4 MiB bound: a ProtocolError, one request, little memory."""
    service.faults.hostile(Hostile.HUGE, path="/sandboxes/{id}", times=None, size=64 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="larger than") as caught:
            await get(api)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"reading a refused answer held {peak} bytes"
    assert caught.value.status == 200
    assert service.faults.count(path="/sandboxes/{id}") == 1  # a protocol error is not retried


async def test_a_declared_huge_answer_is_refused_before_its_body(
    api: ApiClient, service: FakeService
) -> None:
    """A Content-Length past the bound is refused without reading the body."""
    service.faults.fail(200, path="/sandboxes/{id}", body="x" * (5 << 20))
    with pytest.raises(ProtocolError, match="larger than"):
        await get(api)


async def test_a_trickling_server_meets_the_overall_deadline(service: FakeService) -> None:
    """One byte every 0.2 s never trips httpx's read timeout; the 1 s deadline ends each try."""
    service.faults.hostile(Hostile.TRICKLE, path="/sandboxes/{id}", times=None, interval=0.2)
    two = RetryPolicy(attempts=2, timeout=20, wait_initial=0, wait_max=0, wait_jitter=0)
    async with ApiClient(service.url, retry=two, timeout=10, deadline=1.0) as api:
        with pytest.raises(RemoteUnavailable, match="no complete answer within 1 s") as caught:
            await asyncio.wait_for(get(api), GUARD_SECONDS)
    assert not isinstance(caught.value, ProtocolError)
    assert service.faults.count(path="/sandboxes/{id}") == 2


async def test_a_trickled_stream_header_meets_the_deadline(service: FakeService) -> None:
    """A streamed call's headers are bounded too (the server holds them back)."""
    service.faults.delay(60, path="/sandboxes/{id}")
    async with ApiClient(service.url, retry=RetryPolicy(attempts=1), deadline=1.0) as client:
        with pytest.raises(RemoteUnavailable, match="no complete answer"):
            async with client.stream("GET", "/sandboxes/sbx-1", operation="open stream"):
                pass  # pragma: no cover - never reached


def test_transfer_deadline_grows_with_the_size() -> None:
    """Uploads get a deadline of a minute plus a second per MiB."""
    assert transfer_deadline(0) == 60.0
    assert transfer_deadline(10 << 20) == 70.0


async def test_each_wait_is_one_line_naming_what_why_and_the_attempt(
    api: ApiClient, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    """One mango line per retry (what failed, why, attempt n of m); none when no retry follows."""
    service.faults.hostile(Hostile.HTML_500, path="/sandboxes/{id}", times=None)
    with (
        caplog.at_level("WARNING", logger="mango.provider.retries"),
        pytest.raises(RemoteUnavailable),
    ):
        await get(api)
    lines = [r.getMessage() for r in caplog.records if r.name == "mango.provider.retries"]
    assert len(lines) == FAST.attempts - 1
    for number, line in enumerate(lines, start=2):
        assert line.startswith("get sandbox: HTTP 500 (GET http://127.0.0.1:")
        assert line.endswith(f"retrying (attempt {number} of {FAST.attempts})")


def test_the_command_line_shows_mangos_lines_and_not_the_libraries() -> None:
    """Without -v a library's log (stamina's retry_scheduled) stays out; mango's line shows."""
    script = (
        "import logging, sys\n"
        "from mango.cli.main import cli\n"
        "verbose = sys.argv[1:] == ['-v']\n"
        "try:\n"
        "    cli([*sys.argv[1:], 'providers'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "logging.getLogger('stamina').warning('stamina.retry_scheduled')\n"
        "logging.getLogger('mango.provider.retries').warning('list: HTTP 503; retrying')\n"
    )
    quiet = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert quiet.stderr.splitlines() == ["mango: list: HTTP 503; retrying"]
    loud = subprocess.run(
        [sys.executable, "-c", script, "-v"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "WARNING stamina: stamina.retry_scheduled" in loud.stderr.splitlines()
    assert "WARNING mango.provider.retries: list: HTTP 503; retrying" in loud.stderr.splitlines()
