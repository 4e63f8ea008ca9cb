"""Bad answers from the Daytona API (the scaffold's hostile answers): typed errors, binding kept.

Only a confirmed not-found (the API's own 404, a destroyed state) may record
a loss; a malformed answer is a ProtocolError, never "gone" and never
"unmanaged".
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.fakes import FakeService, Hostile
from mango.provider import (
    Command,
    OwnershipError,
    ProtocolError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxSpec,
)
from mango_provider_daytona import DaytonaProvider

from .conftest import make_provider

SPEC = SandboxSpec(timeout=60.0)
GET = "/sandbox/{id}"
GUARD_SECONDS = 30.0
"""A liveness bound: the awaited call must end by itself long before it (never a timing)."""
MALFORMED = [Hostile.WRONG_SHAPE, Hostile.WRONG_TYPES, Hostile.NOT_JSON, Hostile.TRUNCATED_JSON]


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_get_never_records_a_loss(service: FakeService, answer: Hostile) -> None:
    """A restarted worker's attach meets a bad GET: ProtocolError, the binding kept, then works."""
    store = InMemoryBindingStore()
    session = f"hostile-{uuid.uuid4().hex[:8]}"
    first_provider = make_provider(service)
    second_provider = make_provider(service)
    try:
        first = SessionManager(provider=first_provider, store=store)
        await first.ensure_session(session)
        sandbox = await first.acquire(session, SPEC)
        restarted = SessionManager(provider=second_provider, store=store)
        service.faults.hostile(answer, method="GET", path=GET)
        with pytest.raises(ProviderUnavailable) as caught:
            await restarted.acquire(session, SPEC)
        assert isinstance(caught.value, ProtocolError), caught.value
        assert not isinstance(caught.value, SandboxNotFound)
        binding = await store.get_binding(session)
        assert binding is not None
        assert not binding.lost
        assert service.sandboxes.get(sandbox.ref.external_id) is not None
        again = await restarted.acquire(session, SPEC)
        assert (await again.exec(Command(("printf", "kept")))).stdout == b"kept"
        await restarted.release(session)
    finally:
        await first_provider.aclose()
        await second_provider.aclose()


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_presence_answer_is_not_gone(
    service: FakeService, provider: DaytonaProvider, session_key: str, answer: Hostile
) -> None:
    """The view's question after a data-plane failure: a bad answer keeps the failure."""
    sandbox = await provider.create(session_key, SPEC)
    try:
        service.faults.fail(503, method="POST", path="/toolbox/{id}/process/execute")
        service.faults.hostile(answer, method="GET", path=GET)
        with pytest.raises(ProviderUnavailable) as caught:
            await sandbox.exec(Command(("true",)))
        assert not isinstance(caught.value, SandboxNotFound)
    finally:
        service.faults.clear()
        await sandbox.destroy()


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_create_answer_is_a_protocol_error_not_unmanaged(
    service: FakeService, provider: DaytonaProvider, session_key: str, answer: Hostile
) -> None:
    """A create answered with garbage says so; it does not blame ownership."""
    service.faults.hostile(answer, method="POST", path="/sandbox")
    with pytest.raises(ProviderUnavailable) as caught:
        await provider.create(session_key, SPEC)
    assert not isinstance(caught.value, OwnershipError | SandboxNotFound)
    assert "unmanaged" not in str(caught.value)


async def test_a_huge_answer_is_refused_once_with_memory_bounded(
    service: FakeService, provider: DaytonaProvider, session_key: str
) -> None:
    """A 64 MiB GET answer stops at the bound: one request, a ProtocolError."""
    service.faults.hostile(Hostile.HUGE, method="GET", path=GET, size=64 << 20)
    with pytest.raises(ProtocolError, match="larger than"):
        await provider.find(session_key)
    assert service.faults.count("GET", GET) == 1


async def test_a_trickling_api_meets_the_deadline(service: FakeService, session_key: str) -> None:
    """One byte every 0.2 s holds no call past its overall deadline."""
    provider = make_provider(service)
    provider.api.client.deadline = 1.0
    try:
        service.faults.hostile(Hostile.TRICKLE, method="GET", path=GET, times=None, interval=0.2)
        with pytest.raises(ProviderUnavailable, match="no complete answer"):
            await asyncio.wait_for(provider.find(session_key), GUARD_SECONDS)
    finally:
        service.faults.clear()
        await provider.aclose()
