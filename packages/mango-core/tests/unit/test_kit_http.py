"""The httpx error map and retries, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from mango.domain import (
    ConfigurationError,
    InvalidInput,
    MangoError,
    ProviderUnavailable,
    ResourceConflict,
    SandboxNotFound,
)
from mango.fakes import FakeService
from mango.provider.http import (
    ApiClient,
    RemoteRejected,
    RemoteUnavailable,
    RetryPolicy,
    parse_retry_after,
)

SECRET = "sk-live-0123456789abcdef"  # noqa: S105 -- a fake credential the tests look for
FAST = RetryPolicy(attempts=4, timeout=10, wait_initial=0, wait_max=0, wait_jitter=0)


def reflect_routes(service: FakeService) -> list[web.RouteDef]:
    """Routes that answer a chosen status and echo what the client sent (secrets included)."""

    async def status(request: web.Request) -> web.StreamResponse:
        code = int(request.match_info["code"])
        auth = request.headers.get("Authorization", "")
        echo = f"auth={auth} token={auth.partition(' ')[2]} query={request.query_string}"
        return web.Response(status=code, text=f"vendor says no; {echo}")

    async def ok(request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True, "method": request.method})

    async def chunks(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for index in range(3):
            await response.write(f"chunk{index}\n".encode())
        await response.write_eof()
        return response

    return [
        web.route("*", "/status/{code}", status),
        web.route("*", "/ok", ok),
        web.get("/chunks", chunks),
    ]


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[FakeService]:
    """A running reflect server."""
    async with FakeService(tmp_path, reflect_routes, name="reflect") as running:
        yield running


@pytest.fixture
async def api(service: FakeService) -> AsyncIterator[ApiClient]:
    """An ApiClient with a secret bearer token and fast retries."""
    async with ApiClient(
        service.url, auth_headers={"Authorization": f"Bearer {SECRET}"}, retry=FAST, timeout=10
    ) as client:
        yield client


def chain_text(exc: BaseException) -> str:
    """Everything an operator could see of an error: str, repr, hint, causes and contexts."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), str(getattr(current, "hint", ""))]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


async def test_404_is_a_lost_sandbox_only_on_a_sandbox_resource(api: ApiClient) -> None:
    """A 404 naming a sandbox is SandboxNotFound; elsewhere it is a protocol failure."""
    with pytest.raises(SandboxNotFound, match="sbx-1"):
        await api.request("GET", "/status/404", operation="get sandbox", sandbox_id="sbx-1")
    with pytest.raises(RemoteUnavailable) as caught:
        await api.request("GET", "/status/404", operation="list sandboxes", retry=FAST)
    assert not isinstance(caught.value, SandboxNotFound)
    assert caught.value.status == 404


@pytest.mark.parametrize("code", [401, 403])
async def test_auth_failures_are_configuration_errors_without_the_secret(
    service: FakeService, code: int
) -> None:
    """401/403 raise ConfigurationError whose text, repr and chain never hold the credential."""
    async with ApiClient(
        service.url,
        auth_headers={"Authorization": f"Bearer {SECRET}"},
        secrets=(SECRET + "q",),
        retry=FAST,
    ) as api:
        with pytest.raises(ConfigurationError) as caught:
            await api.request(
                "GET", f"/status/{code}", operation="list", params={"api_key": SECRET + "q"}
            )
    assert f"HTTP {code}" in str(caught.value)
    assert SECRET not in chain_text(caught.value)
    assert caught.value.permanent
    assert service.faults.count(path="/status/{code}") == 1


async def test_other_4xx_is_permanent_with_a_redacted_excerpt(api: ApiClient) -> None:
    """A 400 raises RemoteRejected with status and a short body excerpt, secret blanked."""
    with pytest.raises(RemoteRejected) as caught:
        await api.request("POST", "/status/400", operation="create sandbox", json={})
    assert caught.value.status == 400
    assert caught.value.excerpt == "vendor says no; auth=*** token=*** query="
    assert SECRET not in chain_text(caught.value)
    assert caught.value.permanent


async def test_a_redirect_is_not_success(api: ApiClient) -> None:
    """A 3xx (not followed) means the base URL is wrong: RemoteUnavailable, not a response."""
    with pytest.raises(RemoteUnavailable, match="wrong base URL") as caught:
        await api.request("GET", "/status/302", operation="ping", retry=RetryPolicy(attempts=1))
    assert caught.value.status == 302


async def test_409_is_a_catchable_conflict(api: ApiClient, service: FakeService) -> None:
    """A 409 raises ResourceConflict and is not retried."""
    with pytest.raises(ResourceConflict):
        await api.request("PUT", "/status/409", operation="rename")
    assert service.faults.count(path="/status/{code}") == 1


@pytest.mark.parametrize("code", [429, 500, 502, 503])
async def test_transient_statuses_are_retried_until_success(
    api: ApiClient, service: FakeService, code: int
) -> None:
    """429 and 5xx on an idempotent call are retried within the budget."""
    service.faults.fail(code, times=2, path="/ok")
    response = await api.request("GET", "/ok", operation="ping")
    assert response.json() == {"ok": True, "method": "GET"}
    assert service.faults.count(path="/ok") == 3


async def test_attempts_are_bounded(api: ApiClient, service: FakeService) -> None:
    """A service that never recovers costs exactly ``attempts`` requests, then raises."""
    service.faults.fail(503, times=None, path="/ok")
    with pytest.raises(RemoteUnavailable) as caught:
        await api.request("GET", "/ok", operation="ping")
    assert caught.value.status == 503
    assert service.faults.count(path="/ok") == FAST.attempts


async def test_non_idempotent_calls_are_not_retried_unless_asked(
    api: ApiClient, service: FakeService
) -> None:
    """A POST fails on the first 503; with idempotent=True it is retried."""
    service.faults.fail(503, times=1, method="POST", path="/ok")
    with pytest.raises(ProviderUnavailable):
        await api.request("POST", "/ok", operation="create")
    assert service.faults.count("POST", "/ok") == 1
    service.faults.fail(503, times=1, method="POST", path="/ok")
    assert (await api.request("POST", "/ok", operation="create", idempotent=True)).is_success
    assert service.faults.count("POST", "/ok") == 3


async def test_retry_after_is_honoured_and_capped(api: ApiClient, service: FakeService) -> None:
    """Retry-After replaces the (zero) backoff, capped by retry_after_max."""
    policy = RetryPolicy(
        attempts=3, timeout=10, wait_initial=0, wait_max=0, wait_jitter=0, retry_after_max=0.3
    )
    service.faults.fail(429, times=1, path="/ok", headers={"Retry-After": "30"})
    started = time.monotonic()
    await api.request("GET", "/ok", operation="ping", retry=policy)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 10
    assert service.faults.count(path="/ok") == 2


async def test_retry_after_as_http_date(api: ApiClient, service: FakeService) -> None:
    """An HTTP-date Retry-After is honoured (a date in the past means retry now)."""
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    service.faults.fail(503, times=1, path="/ok", headers={"Retry-After": past})
    await api.request("GET", "/ok", operation="ping")
    assert service.faults.count(path="/ok") == 2


async def test_retry_after_beyond_the_budget_fails_now(
    api: ApiClient, service: FakeService
) -> None:
    """A Retry-After longer than the time left gives up instead of sleeping past the budget."""
    policy = RetryPolicy(attempts=5, timeout=2, retry_after_max=60)
    service.faults.fail(503, times=1, path="/ok", headers={"Retry-After": "30"})
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable) as caught:
        await api.request("GET", "/ok", operation="ping", retry=policy)
    assert time.monotonic() - started < 2
    assert caught.value.retry_after == 30
    assert service.faults.count(path="/ok") == 1


async def test_timeouts_are_retryable_unavailability(service: FakeService) -> None:
    """A server that holds the request past the client timeout gives RemoteUnavailable."""
    service.faults.delay(60, path="/ok")
    async with ApiClient(
        service.url, timeout=0.2, retry=RetryPolicy(attempts=2, wait_initial=0, wait_jitter=0)
    ) as api:
        with pytest.raises(RemoteUnavailable, match="timed out") as caught:
            await api.request("GET", "/ok", operation="ping")
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert service.faults.count(path="/ok") == 2


async def test_a_dropped_response_is_unavailability_and_a_post_is_not_repeated(
    api: ApiClient, service: FakeService
) -> None:
    """The server commits and drops the connection: RemoteUnavailable, one request only."""
    service.faults.drop_after_commit(method="POST", path="/ok")
    with pytest.raises(RemoteUnavailable, match="transport failure"):
        await api.request("POST", "/ok", operation="create")
    assert service.faults.count("POST", "/ok") == 1


async def test_connection_refused_never_shows_the_secret(tmp_path: Path) -> None:
    """A dead server is RemoteUnavailable; neither header nor query secret leaks."""
    async with FakeService(tmp_path, reflect_routes) as gone:
        url = gone.url
    async with ApiClient(
        url, auth_headers={"X-Api-Key": SECRET}, secrets=(SECRET,), retry=FAST
    ) as api:
        with pytest.raises(RemoteUnavailable) as caught:
            await api.request("GET", "/ok", operation="ping", params={"key": SECRET})
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert SECRET not in chain_text(caught.value)
    assert SECRET not in repr(api)


async def test_a_non_http_base_url_is_a_configuration_error() -> None:
    """An unusable base URL is permanent, and its text (which may hold a key) is not quoted."""
    async with ApiClient(f"ftp://example.invalid/{SECRET}", retry=FAST) as api:
        with pytest.raises(ConfigurationError) as caught:
            await api.request("GET", "/ok", operation="ping")
    assert SECRET not in chain_text(caught.value)


async def test_stream_reads_bodies_and_maps_errors(api: ApiClient, service: FakeService) -> None:
    """stream() yields a streamed body; error statuses are mapped before the block runs."""
    service.faults.fail(503, times=1, path="/chunks")
    async with api.stream("GET", "/chunks", operation="download") as response:
        lines = [line async for line in response.aiter_lines()]
    assert lines == ["chunk0", "chunk1", "chunk2"]
    assert service.faults.count(path="/chunks") == 2
    with pytest.raises(SandboxNotFound):
        async with api.stream("GET", "/status/404", operation="download", sandbox_id="s"):
            pytest.fail("the block must not run for an error status")
    with pytest.raises(RemoteRejected) as caught:
        async with api.stream("GET", "/status/422", operation="download"):
            pytest.fail("the block must not run for an error status")
    assert SECRET not in chain_text(caught.value)


def test_parse_retry_after() -> None:
    """Delay-seconds, HTTP dates (relative to now), and garbage."""
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:05 GMT", now=now) == 5.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    "kwargs", [{"attempts": 0}, {"timeout": -1}, {"wait_max": -1}, {"timeout": float("inf")}]
)
def test_retry_policy_is_validated(kwargs: dict[str, float]) -> None:
    """Budgets must be positive and finite."""
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_errors_are_in_the_mango_tree() -> None:
    """The kit's errors keep their place: unavailable retries, rejected is permanent."""
    assert issubclass(RemoteUnavailable, ProviderUnavailable)
    assert issubclass(RemoteRejected, MangoError)
    assert not RemoteUnavailable("x").permanent
    assert RemoteRejected("x", status=400, excerpt="").permanent


def test_importing_the_surface_pulls_no_remote_library() -> None:
    """``import mango.provider`` imports neither httpx, stamina nor aiohttp."""
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import mango.provider"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in completed.stderr.splitlines()
    }
    assert imported & {"httpx", "stamina", "aiohttp"} == set()
    assert "mango" in imported


async def test_a_streamed_request_body_is_never_replayed(
    api: ApiClient, service: FakeService
) -> None:
    """A PUT whose body is an iterator fails on the first 503 instead of resending nothing."""

    async def body() -> AsyncIterator[bytes]:
        yield b"part"

    service.faults.fail(503, times=1, method="PUT", path="/ok")
    with pytest.raises(RemoteUnavailable):
        await api.request("PUT", "/ok", operation="upload", content=body())
    assert service.faults.count("PUT", "/ok") == 1
