"""Bad answers from the OpenSandbox server (the scaffold's hostile answers): typed errors.

A 200 that is not JSON or is truncated JSON was a raw ``JSONDecodeError``
(create, list, get, endpoint); a malformed get was blamed on ownership. Each
is a ProtocolError now, the binding kept, never a loss.
"""

from __future__ import annotations

import asyncio
import tracemalloc
import uuid
from collections.abc import AsyncIterator

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.fakes import Hostile
from mango.provider import (
    Command,
    OwnershipError,
    ProtocolError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxSpec,
)
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.settings import REGISTRATION

from .conftest import FAST_RETRY

SPEC = SandboxSpec(timeout=60)
GET = "/v1/sandboxes/{id}"
LIST = "/v1/sandboxes"
ENDPOINT = "/v1/sandboxes/{id}/endpoints/{port}"
COMMAND = "/v1/sandboxes/{id}/proxy/{port}/{tail}"
MALFORMED = [Hostile.WRONG_SHAPE, Hostile.WRONG_TYPES, Hostile.NOT_JSON, Hostile.TRUNCATED_JSON]
GUARD_SECONDS = 30.0
"""A liveness bound: the awaited call must end by itself long before it (never a timing)."""


@pytest.fixture
async def providers(fake: FakeOpenSandbox) -> AsyncIterator[list[OpenSandboxProvider]]:
    """Two providers through the server proxy (a worker and a restarted one)."""
    namespace = f"h-{uuid.uuid4().hex[:10]}"
    made = [
        OpenSandboxProvider(
            fake.url, api_key=fake.api_key, namespace=namespace, server_proxy=True, retry=FAST_RETRY
        )
        for _ in range(2)
    ]
    yield made
    for provider in made:
        await provider.aclose()


def manager(provider: OpenSandboxProvider, store: InMemoryBindingStore) -> SessionManager:
    """A SessionManager over ``provider`` with the registration's capabilities."""
    return SessionManager(provider, store, REGISTRATION.capabilities, REGISTRATION.quirks)


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_get_is_a_protocol_error_not_unmanaged_nor_lost(
    fake: FakeOpenSandbox, providers: list[OpenSandboxProvider], answer: Hostile
) -> None:
    """A restarted worker's attach meets a bad GET: ProtocolError, the binding kept."""
    store = InMemoryBindingStore()
    session = f"hostile-{uuid.uuid4().hex[:8]}"
    first = manager(providers[0], store)
    await first.ensure_session(session)
    sandbox = await first.acquire(session, SPEC)
    restarted = manager(providers[1], store)
    fake.faults.hostile(answer, method="GET", path=GET)
    with pytest.raises(ProtocolError) as caught:
        await restarted.acquire(session, SPEC)
    assert not isinstance(caught.value, SandboxNotFound | OwnershipError)
    assert "unmanaged" not in str(caught.value)
    binding = await store.get_binding(session)
    assert binding is not None
    assert not binding.lost
    again = await restarted.acquire(session, SPEC)
    assert (await again.exec(Command(("printf", "kept")))).stdout == b"kept"
    assert again.ref == sandbox.ref
    await restarted.release(session)


@pytest.mark.parametrize("answer", [Hostile.NOT_JSON, Hostile.TRUNCATED_JSON, Hostile.WRONG_SHAPE])
@pytest.mark.parametrize(
    ("method", "path"), [("POST", LIST), ("GET", LIST), ("GET", ENDPOINT)], ids=str
)
async def test_create_list_and_endpoint_answers_that_are_not_json_are_typed(
    fake: FakeOpenSandbox,
    providers: list[OpenSandboxProvider],
    answer: Hostile,
    method: str,
    path: str,
) -> None:
    """No raw JSONDecodeError: a ProtocolError (retryable), and nothing is left half-made."""
    fake.faults.hostile(answer, method=method, path=path)
    with pytest.raises(ProviderUnavailable) as caught:
        await providers[0].create(f"k-{uuid.uuid4().hex[:8]}", SPEC)
    assert isinstance(caught.value, ProtocolError)
    assert not isinstance(caught.value, SandboxNotFound | OwnershipError)


async def test_a_huge_answer_is_refused_once(
    fake: FakeOpenSandbox, providers: list[OpenSandboxProvider]
) -> None:
    """A 64 MiB list answer stops at the bound: one request, a ProtocolError."""
    fake.faults.hostile(Hostile.HUGE, method="GET", path=LIST, size=64 << 20)
    with pytest.raises(ProtocolError, match="larger than"):
        await providers[0].find("huge-key")
    assert fake.faults.count("GET", LIST) == 1


async def test_an_event_stream_without_newlines_is_bounded(
    fake: FakeOpenSandbox, providers: list[OpenSandboxProvider]
) -> None:
    """A command stream that never ends a line stops at the frame bound, not in memory."""
    sandbox = await providers[0].create("stream-key", SPEC)
    try:
        fake.faults.hostile(Hostile.HUGE, method="POST", path=COMMAND, size=64 << 20)
        tracemalloc.start()
        try:
            with pytest.raises(ProviderUnavailable, match="longer than"):
                await sandbox.exec(Command(("true",)))
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 48 << 20, f"a line without an end held {peak} bytes"
        assert (await sandbox.exec(Command(("printf", "after")))).stdout == b"after"
    finally:
        await sandbox.destroy()


async def test_a_trickling_server_meets_the_deadline(fake: FakeOpenSandbox) -> None:
    """One byte every 0.2 s holds no call past its overall deadline."""
    provider = OpenSandboxProvider(fake.url, api_key=fake.api_key, retry=FAST_RETRY)
    provider.lifecycle.client.deadline = 1.0
    try:
        fake.faults.hostile(Hostile.TRICKLE, method="GET", path=LIST, times=None, interval=0.2)
        with pytest.raises(ProviderUnavailable, match="no complete answer"):
            await asyncio.wait_for(provider.find("trickle-key"), GUARD_SECONDS)
    finally:
        fake.faults.clear()
        await provider.aclose()
