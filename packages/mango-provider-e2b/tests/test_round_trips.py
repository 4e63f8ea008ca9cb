"""Round trips per operation.

Commands one after another share one envd connection: a stream read to its end goes back
to the pool (a new connection per command costs a connect, a resolver call and, against a
real sandbox, a TLS handshake). Attaching a running sandbox is one control-plane call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from mango.provider import Command, SandboxSpec
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.conformance import e2b_fake_options
from mango_provider_e2b.fake import E2BFakeService

from .conftest import NAMESPACE, SPEC, control_calls, make_provider


class _CountingTransport(httpx.AsyncBaseTransport):
    """httpx's own transport, counting the TCP connections it opens (httpcore's trace events)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.connects: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path

        async def trace(event: str, _info: dict[str, Any]) -> None:
            if event == "connection.connect_tcp.complete":
                self.connects.append(path)

        request.extensions = {**request.extensions, "trace": trace}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
async def counted(fake: E2BFakeService) -> AsyncIterator[tuple[E2BProvider, _CountingTransport]]:
    transport = _CountingTransport()
    made = E2BProvider(
        e2b_fake_options(fake.url, fake.config), namespace=NAMESPACE, transport=transport
    )
    try:
        yield made, transport
    finally:
        await made.aclose()


def _envd(connects: list[str]) -> list[str]:
    return [path for path in connects if path.startswith("/process.")]


async def test_commands_in_a_row_reuse_one_envd_connection(
    counted: tuple[E2BProvider, _CountingTransport], session_key: str
) -> None:
    provider, transport = counted
    sandbox = await provider.create(session_key, SPEC)
    try:
        first = await sandbox.exec(Command(("sh", "-c", "printf one")))
        assert (first.exit_code, first.stdout) == (0, b"one")
        before = len(_envd(transport.connects))
        for n in range(5):
            result = await sandbox.exec(Command(("sh", "-c", f"printf {n}; exit {n}")))
            assert (result.exit_code, result.stdout) == (n, str(n).encode())
        assert _envd(transport.connects)[before:] == [], transport.connects
    finally:
        await sandbox.destroy()


async def test_a_timed_out_command_still_leaves_a_usable_connection(
    counted: tuple[E2BProvider, _CountingTransport], session_key: str
) -> None:
    provider, _ = counted
    sandbox = await provider.create(session_key, SandboxSpec(timeout=30.0))
    try:
        slow = await sandbox.exec(Command(("sleep", "30"), timeout=0.5))
        assert slow.timed_out
        after = await sandbox.exec(Command(("sh", "-c", "printf ok")))
        assert (after.exit_code, after.stdout) == (0, b"ok")
    finally:
        await sandbox.destroy()


async def test_attach_of_a_running_sandbox_is_one_get_and_extends_only_when_needed(
    fake: E2BFakeService, session_key: str
) -> None:
    """The GET says all a connect would (envd's token, ``endAt``): a restarted worker's attach
    makes no connect; the first command that needs more time than is left extends it."""
    first = make_provider(fake)
    restarted = make_provider(fake)
    try:
        sandbox = await first.create(session_key, SPEC)
        mark = len(fake.faults.log)
        attached = await restarted.attach(session_key, sandbox.ref, SPEC)
        assert control_calls(fake, mark) == ["GET /sandboxes/{id}"]
        mark = len(fake.faults.log)
        done = await attached.exec(Command(("sh", "-c", "printf attached")))
        assert (done.exit_code, done.stdout) == (0, b"attached")
        assert control_calls(fake, mark) == []  # the create gave it the idle timeout
        # Another worker shortens its life: a fresh attach sees that in endAt and extends it.
        assert await first._control.set_timeout(sandbox.ref.external_id, 5)
        again = make_provider(fake)
        try:
            late = await again.attach(session_key, sandbox.ref, SPEC)
            mark = len(fake.faults.log)
            assert (await late.exec(Command(("true",)))).exit_code == 0
            assert control_calls(fake, mark) == ["POST /sandboxes/{id}/timeout"]
        finally:
            await again.aclose()
        await sandbox.destroy()
    finally:
        await first.aclose()
        await restarted.aclose()
