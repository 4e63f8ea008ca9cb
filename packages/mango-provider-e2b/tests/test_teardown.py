"""A sandbox destroyed elsewhere while a command runs: the exec ends cancelled, promptly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from mango.provider import Command, ExecResult, OutputChunk, OutputStream
from mango_provider_e2b import E2BProvider, E2BSandbox
from mango_provider_e2b.connect import decode_envelopes, encode_envelope
from mango_provider_e2b.fake import E2BFakeService

from .conftest import SPEC, control_calls, make_provider

PROMPT_SECONDS = 5.0
"""A torn-down command's exec returns within this (well under the 30 s it would sleep)."""


@pytest.fixture
async def other(fake: E2BFakeService) -> AsyncIterator[E2BProvider]:
    """A second provider over the same fake: another worker, or ``mango sessions delete``."""
    made = make_provider(fake)
    try:
        yield made
    finally:
        await made.aclose()


async def _started(fake: E2BFakeService, sandbox: E2BSandbox) -> None:
    sandbox_id = sandbox.ref.external_id
    assert await fake.wait_until(lambda: bool(fake.processes(sandbox_id)), timeout=10)


async def _destroy_elsewhere(service: E2BFakeService, session_key: str) -> None:
    first, second = make_provider(service), make_provider(service)
    try:
        sandbox = await first.create(session_key, SPEC)
        task = asyncio.ensure_future(sandbox.exec(Command(("sleep", "30"), timeout=60)))
        await _started(service, sandbox)
        started = time.monotonic()
        await second.destroy(session_key, sandbox.ref)
        result = await asyncio.wait_for(task, PROMPT_SECONDS)
        assert (result.cancelled, result.exit_code, result.timed_out) == (True, -1, False)
        assert time.monotonic() - started < PROMPT_SECONDS
        assert service.state(sandbox.ref.external_id) == "deleted"
    finally:
        await first.aclose()
        await second.aclose()


async def test_destroy_by_another_provider_cancels_a_running_exec(
    fake: E2BFakeService, session_key: str
) -> None:
    """Provider B destroys while provider A's exec runs ``sleep 30``: A gets cancelled, exit -1."""
    await _destroy_elsewhere(fake, session_key)


async def test_destroy_by_another_cube_provider_cancels_a_running_exec(
    cube_fake: E2BFakeService, session_key: str
) -> None:
    """The same in Cube mode (the cube provider reuses this client)."""
    await _destroy_elsewhere(cube_fake, session_key)


async def test_destroy_elsewhere_ends_an_exec_stream_cancelled(
    other: E2BProvider, sandbox: E2BSandbox, session_key: str
) -> None:
    """exec_stream goes through the same producer: its final result is cancelled too."""
    command = Command(("sh", "-c", "printf before; sleep 30"), timeout=60)
    events = []
    async with sandbox.exec_stream(command) as stream:
        async for event in stream:
            events.append(event)
            if len(events) == 1:
                await other.destroy(session_key, sandbox.ref)
    first, final = events[0], events[-1]
    assert first == OutputChunk(OutputStream.STDOUT, b"before")
    assert isinstance(final, ExecResult)
    assert (final.cancelled, final.exit_code) == (True, -1)


async def test_a_command_killing_itself_is_exit_137_not_cancelled(
    fake: E2BFakeService, sandbox: E2BSandbox
) -> None:
    """``kill -9 $$`` in a sandbox that is still there: exit 137, cancelled=False."""
    gets = fake.faults.count("GET", "/sandboxes/{id}")
    result = await sandbox.exec(Command(("sh", "-c", "kill -9 $$"), timeout=30))
    assert (result.exit_code, result.cancelled) == (137, False)
    # The control plane was asked (the end looked like a teardown) and said "running".
    assert fake.faults.count("GET", "/sandboxes/{id}") > gets
    assert fake.state(sandbox.ref.external_id) == "running"
    assert (await sandbox.exec(Command(("printf", "alive")))).stdout == b"alive"


async def test_ordinary_exits_make_no_control_plane_call(
    fake: E2BFakeService, sandbox: E2BSandbox
) -> None:
    """Exit 0 and an ordinary non-zero exit cost no round trip to the control plane."""
    await sandbox.exec(Command(("true",), timeout=30))  # the keep-alive is settled first
    before = len(control_calls(fake))
    ok = await sandbox.exec(Command(("true",), timeout=30))
    failed = await sandbox.exec(Command(("sh", "-c", "exit 3"), timeout=30))
    assert (ok.exit_code, failed.exit_code) == (0, 3)
    assert not ok.cancelled
    assert not failed.cancelled
    assert len(control_calls(fake)) == before


async def test_deleted_sandbox_cuts_the_stream_without_an_end_event(
    fake: E2BFakeService, sandbox: E2BSandbox
) -> None:
    """The fake as E2B: deleting a sandbox aborts its process streams (envd dies with it)."""
    sandbox_id = sandbox.ref.external_id
    record = fake.sandboxes.find(sandbox_id)
    assert record is not None
    request = {"process": {"cmd": "sleep", "args": ["30"], "envs": {}, "cwd": "/workspace"}}
    headers = {
        "Content-Type": "application/connect+json",
        "Connect-Protocol-Version": "1",
        "E2b-Sandbox-Id": sandbox_id,
        "X-Access-Token": record.token,
    }
    kinds: list[str] = []

    async def read(response: httpx.Response) -> None:
        async for envelope in decode_envelopes(response.aiter_raw()):
            kinds.extend(envelope.payload.get("event", {}))
            if kinds == ["start"]:
                await fake.delete_sandbox(sandbox_id)

    async with (
        httpx.AsyncClient(base_url=fake.url) as client,
        client.stream(
            "POST", "/process.Process/Start", content=encode_envelope(request), headers=headers
        ) as response,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await read(response)
    assert kinds == ["start"]
