"""Bad answers from E2B's control plane and envd (the scaffold's hostile answers): typed errors.

A malformed answer is a ProtocolError (retryable, the binding kept), never a
loss; envd's Stat on a body that is not JSON was a traceback.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.fakes import Hostile
from mango.provider import (
    Command,
    OwnershipError,
    ProtocolError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango_provider_e2b import E2BProvider, E2BSandbox
from mango_provider_e2b.fake import E2BFakeService

from .conftest import SPEC, make_provider

GET = "/sandboxes/{id}"
LIST = "/v2/sandboxes"
STAT = "/filesystem.Filesystem/{method}"
MALFORMED = [Hostile.WRONG_SHAPE, Hostile.WRONG_TYPES, Hostile.NOT_JSON, Hostile.TRUNCATED_JSON]
GUARD_SECONDS = 30.0
"""A liveness bound: the awaited call must end by itself long before it (never a timing)."""


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_get_never_records_a_loss(fake: E2BFakeService, answer: Hostile) -> None:
    """A restarted worker's attach meets a bad GET: ProtocolError, the binding kept, then works."""
    store = InMemoryBindingStore()
    session = f"hostile-{uuid.uuid4().hex[:8]}"
    first_provider, second_provider = make_provider(fake), make_provider(fake)
    try:
        first = SessionManager(provider=first_provider, store=store)
        await first.ensure_session(session)
        await first.acquire(session, SPEC)
        restarted = SessionManager(provider=second_provider, store=store)
        fake.faults.hostile(answer, method="GET", path=GET)
        with pytest.raises(ProtocolError) as caught:
            await restarted.acquire(session, SPEC)
        assert not isinstance(caught.value, SandboxNotFound | OwnershipError)
        binding = await store.get_binding(session)
        assert binding is not None
        assert not binding.lost
        again = await restarted.acquire(session, SPEC)
        assert (await again.exec(Command(("printf", "kept")))).stdout == b"kept"
        await restarted.release(session)
    finally:
        await first_provider.aclose()
        await second_provider.aclose()


@pytest.mark.parametrize("answer", [Hostile.NOT_JSON, Hostile.TRUNCATED_JSON, Hostile.WRONG_SHAPE])
async def test_envd_stat_that_is_not_json_is_a_protocol_error(
    fake: E2BFakeService, sandbox: E2BSandbox, answer: Hostile
) -> None:
    """``mango files read`` on a Stat answer that is not JSON: a typed error, not a traceback."""
    await sandbox.write_file("note.txt", b"hello")
    fake.faults.hostile(answer, method="POST", path=STAT)
    with pytest.raises(ProtocolError):
        await sandbox.read_file("note.txt")
    assert await sandbox.read_file("note.txt") == b"hello"


@pytest.mark.parametrize("answer", MALFORMED, ids=lambda answer: answer.value)
async def test_a_malformed_list_is_a_protocol_error(
    fake: E2BFakeService, provider: E2BProvider, session_key: str, answer: Hostile
) -> None:
    """create lists first: a bad list answer says so and creates nothing."""
    fake.faults.hostile(answer, method="GET", path=LIST, times=None)
    with pytest.raises(ProviderUnavailable) as caught:
        await provider.create(session_key, SPEC)
    assert isinstance(caught.value, ProtocolError)
    fake.faults.clear()
    assert fake.sandboxes.list(provider.ownership.labels(session_key)) == []


async def test_a_huge_answer_is_refused_once(
    fake: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """A 64 MiB list answer stops at the bound: one request, a ProtocolError."""
    fake.faults.hostile(Hostile.HUGE, method="GET", path=LIST, size=64 << 20)
    with pytest.raises(ProtocolError, match="larger than"):
        await provider.find(session_key)
    assert fake.faults.count("GET", LIST) == 1


async def test_a_trickling_control_plane_meets_the_deadline(
    fake: E2BFakeService, session_key: str
) -> None:
    """One byte every 0.2 s holds no call past its overall deadline (2 x request_timeout)."""
    provider = make_provider(fake, request_timeout=0.5)
    try:
        fake.faults.hostile(Hostile.TRICKLE, method="GET", path=LIST, times=None, interval=0.2)
        with pytest.raises(ProviderUnavailable, match="no complete answer"):
            await asyncio.wait_for(provider.find(session_key), GUARD_SECONDS)
    finally:
        fake.faults.clear()
        await provider.aclose()
