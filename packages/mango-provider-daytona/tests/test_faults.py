"""Fault tests against the fake Daytona: lost responses, 5xx, sandboxes changed behind our back."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.fakes import Beacon, FakeService
from mango.provider import (
    Command,
    ConfigurationError,
    ExecEvent,
    ExecResult,
    ProviderContext,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxSpec,
)
from mango_provider_daytona import DaytonaProvider, DaytonaSandbox
from mango_provider_daytona.fake import DaytonaFake
from mango_provider_daytona.settings import (
    API_KEY_ENV,
    StderrProgress,
    open_daytona_provider,
    read_daytona_settings,
)

from .conftest import NAMESPACE, make_provider

SPEC = SandboxSpec(timeout=60.0)
Opener = Callable[..., DaytonaProvider]
EXECUTE = "/toolbox/{id}/process/execute"


def _owned(service: FakeService, provider: DaytonaProvider) -> list[str]:
    return [record.id for record in service.sandboxes.list(provider.ownership.selector())]


async def test_lost_create_response_finds_the_same_sandbox(
    service: FakeService, provider: DaytonaProvider, session_key: str
) -> None:
    """Daytona created the sandbox but the response was lost: create finds it by name, once."""
    service.faults.drop_after_commit(method="POST", path="/sandbox")
    sandbox = await provider.create(session_key, SPEC)
    assert _owned(service, provider) == [sandbox.ref.external_id]
    again = await provider.create(session_key, SPEC)
    assert again.ref == sandbox.ref
    assert service.faults.count("POST", "/sandbox") == 1


async def test_name_conflict_resolves_to_the_winner(
    service: FakeService, provider: DaytonaProvider, session_key: str, open_provider: Opener
) -> None:
    """A 409 on create (another worker won the name) attaches to the winner's sandbox."""
    winner = await open_provider().create(session_key, SPEC)
    # The lookup before create misses once (as if the winner came in between).
    service.faults.fail(404, method="GET", path=f"/sandbox/{provider.ownership.name(session_key)}")
    sandbox = await provider.create(session_key, SPEC)
    assert sandbox.ref == winner.ref
    assert service.faults.count("POST", "/sandbox") == 2  # the winner's, and our 409


async def test_5xx_during_exec_keeps_the_binding(service: FakeService) -> None:
    """A 503 from the toolbox is retryable: the binding stays, the next exec works."""
    provider = make_provider(service)
    manager = SessionManager(provider=provider, store=InMemoryBindingStore())
    session = f"fault-5xx-{uuid.uuid4().hex[:8]}"
    try:
        await manager.ensure_session(session)
        sandbox = await manager.acquire(session, SPEC)
        service.faults.fail(503, method="POST", path=EXECUTE)
        with pytest.raises(ProviderUnavailable) as caught:
            await sandbox.exec(Command(("true",)))
        assert not isinstance(caught.value, SandboxNotFound)
        binding = await manager.store.get_binding(session)
        assert binding is not None
        assert not binding.lost
        again = await manager.acquire(session, SPEC)
        assert (await again.exec(Command(("sh", "-c", "printf ok")))).stdout == b"ok"
        await manager.release(session)
    finally:
        await provider.aclose()


async def test_sandbox_deleted_behind_our_back_is_lost_never_replaced(
    service: FakeService,
) -> None:
    """A sandbox deleted in Daytona: exec and attach say SandboxNotFound; nothing is recreated."""
    store = InMemoryBindingStore()
    session = f"fault-lost-{uuid.uuid4().hex[:8]}"
    provider = make_provider(service)
    try:
        first = SessionManager(provider=provider, store=store)
        await first.ensure_session(session)
        sandbox = await first.acquire(session, SPEC)
        await service.sandboxes.delete(sandbox.ref.external_id)
        with pytest.raises(SandboxNotFound):
            await sandbox.exec(Command(("true",)))
        restarted = SessionManager(provider=make_provider(service), store=store)
        # closed below, after release
        with pytest.raises(SandboxNotFound):
            await restarted.acquire(session, SPEC)
        binding = await store.get_binding(session)
        assert binding is not None
        assert binding.lost
        with pytest.raises(SandboxNotFound):
            await restarted.acquire(session, SPEC)
        assert service.faults.count("POST", "/sandbox") == 1
        assert _owned(service, provider) == []
        await restarted.release(session)
        await restarted.provider.aclose()
    finally:
        await provider.aclose()


@pytest.mark.parametrize("state", ["stopped", "archived", "paused"])
async def test_stopped_or_archived_sandbox_is_started_on_attach(
    service: FakeService, fake: DaytonaFake, session_key: str, state: str, open_provider: Opener
) -> None:
    """Attach starts a stopped, archived or paused sandbox, waits for it, and reports progress."""
    created = await open_provider().create(session_key, SPEC)
    await created.write_file("kept.txt", b"kept")
    fake.set_state(created.ref.external_id, state)
    fake.start_polls = 3
    lines = io.StringIO()
    provider = make_provider(service, progress=StderrProgress(lines))
    try:
        sandbox = await provider.attach(session_key, created.ref, SPEC)
        assert await sandbox.read_file("kept.txt") == b"kept"
        progress = lines.getvalue()
        assert f"sandbox is {state}; starting it" in progress
        assert "sandbox is starting, waiting until it is started" in progress
        assert "started after" in progress
        assert service.faults.count("POST", "/sandbox/{id}/start") == 1
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_keep_alive_resumes_a_paused_cached_client(
    service: FakeService, fake: DaytonaFake, sandbox: object
) -> None:
    """A cached client whose sandbox was auto-paused: exec says not running, keep_alive resumes."""
    from mango_provider_daytona import DaytonaSandbox

    assert isinstance(sandbox, DaytonaSandbox)
    fake.set_state(sandbox.ref.external_id, "paused")
    with pytest.raises(SandboxNotRunning):
        await sandbox.exec(Command(("true",)))
    await sandbox.keep_alive()
    assert (await sandbox.exec(Command(("sh", "-c", "printf up")))).stdout == b"up"
    assert service.faults.count("POST", "/sandbox/{id}/last-activity") >= 1


async def test_start_that_never_finishes_is_bounded(
    service: FakeService, fake: DaytonaFake, session_key: str, open_provider: Opener
) -> None:
    """A sandbox stuck in starting fails attach after the start timeout (retryable)."""
    created = await open_provider().create(session_key, SPEC)
    fake.set_state(created.ref.external_id, "stopped")
    fake.start_polls = 10_000
    provider = make_provider(service, start_timeout=0.3)
    try:
        with pytest.raises(ProviderUnavailable, match="still starting"):
            await provider.attach(session_key, created.ref, SPEC)
    finally:
        await provider.aclose()


def test_absent_credentials_are_a_clear_configuration_error() -> None:
    """Without DAYTONA_API_KEY the factory fails, naming the variable."""
    with pytest.raises(ConfigurationError, match=API_KEY_ENV):
        read_daytona_settings({})
    with pytest.raises(ConfigurationError, match=API_KEY_ENV):
        open_daytona_provider(ProviderContext(NAMESPACE, {API_KEY_ENV: "  "}))


async def test_refused_credentials_are_never_echoed(service: FakeService) -> None:
    """A wrong key: health and create raise ConfigurationError whose text holds no key."""
    secret = "dtn_" + uuid.uuid4().hex
    provider = DaytonaProvider(service.url, secret, namespace=NAMESPACE)
    try:
        for call in (provider.health(), provider.create("refused", SPEC)):
            with pytest.raises(ConfigurationError) as caught:
                await call
            text = f"{caught.value} {caught.value.hint} {caught.value!r}"
            assert secret not in text
            assert "credentials" in str(caught.value)
        assert secret not in repr(provider)
        assert secret not in repr(read_daytona_settings({API_KEY_ENV: secret}))
    finally:
        await provider.aclose()


async def test_unreachable_api_is_retryable(tmp_path: object) -> None:
    """No Daytona at the URL: health raises ProviderUnavailable."""
    provider = DaytonaProvider("http://127.0.0.1:9", "key", namespace=NAMESPACE)
    try:
        with pytest.raises(ProviderUnavailable):
            await provider.health()
    finally:
        await provider.aclose()


RUNNING = Command(("sh", "-c", "echo up > started; sleep 30"))
"""Writes to the beacon ``started`` once it runs (see :func:`_beacon`)."""


def _beacon(service: FakeService, sandbox: DaytonaSandbox) -> AbstractAsyncContextManager[Beacon]:
    """The beacon ``started`` in the sandbox's home, which :data:`RUNNING` writes to."""
    return service.sandboxes.get(sandbox.ref.external_id).beacon("started")


async def _stream(sandbox: DaytonaSandbox, command: Command) -> list[ExecEvent]:
    async with sandbox.exec_stream(command) as events:
        return [event async for event in events]


async def test_destroy_by_another_provider_cancels_a_running_command(
    provider: DaytonaProvider, session_key: str, open_provider: Opener, service: FakeService
) -> None:
    """Provider B deletes the sandbox while A's ``sleep 30`` runs: A's exec returns cancelled."""
    sandbox = await provider.create(session_key, SPEC)
    async with _beacon(service, sandbox) as started:
        task = asyncio.ensure_future(sandbox.exec(RUNNING))
        await started.wait(30)
    began = time.monotonic()
    await open_provider().destroy(session_key, sandbox.ref)
    result = await asyncio.wait_for(task, 10)
    assert (result.cancelled, result.exit_code, result.timed_out) == (True, -1, False)
    assert time.monotonic() - began < 5


async def test_destroy_by_another_provider_cancels_a_streamed_command(
    provider: DaytonaProvider, session_key: str, open_provider: Opener, service: FakeService
) -> None:
    """The same through exec_stream: the final event is a cancelled result."""
    sandbox = await provider.create(session_key, SPEC)
    async with _beacon(service, sandbox) as started:
        task = asyncio.ensure_future(_stream(sandbox, RUNNING))
        await started.wait(30)
    await open_provider().destroy(session_key, sandbox.ref)
    events = await asyncio.wait_for(task, 10)
    final = events[-1]
    assert isinstance(final, ExecResult)
    assert (final.cancelled, final.exit_code) == (True, -1)


async def test_exec_on_a_sandbox_deleted_before_the_call_is_not_found(
    provider: DaytonaProvider, session_key: str, open_provider: Opener
) -> None:
    """A sandbox another provider deleted before exec started: SandboxNotFound, never cancelled."""
    sandbox = await provider.create(session_key, SPEC)
    await open_provider().destroy(session_key, sandbox.ref)
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(Command(("true",)))
    with pytest.raises(SandboxNotFound):
        await _stream(sandbox, Command(("true",)))


async def test_a_command_killing_itself_keeps_its_status_at_no_extra_cost(
    service: FakeService, sandbox: DaytonaSandbox
) -> None:
    """``kill -9 $$`` in a live sandbox is the command's own 137, and asks the API nothing."""
    gets = service.faults.count("GET", "/sandbox/{id}")
    result = await sandbox.exec(Command(("sh", "-c", "kill -9 $$")))
    assert (result.exit_code, result.cancelled, result.timed_out) == (137, False, False)
    assert (await sandbox.exec(Command(("true",)))).exit_code == 0
    assert service.faults.count("GET", "/sandbox/{id}") == gets


async def test_502_from_a_live_sandbox_stays_retryable(
    service: FakeService, sandbox: DaytonaSandbox
) -> None:
    """A bad gateway while the sandbox lives is ProviderUnavailable, not a cancelled command."""
    service.faults.fail(502, method="POST", path=EXECUTE)
    with pytest.raises(ProviderUnavailable) as caught:
        await sandbox.exec(Command(("true",)))
    assert not isinstance(caught.value, SandboxNotFound)
    assert (await sandbox.exec(Command(("sh", "-c", "printf ok")))).stdout == b"ok"


async def test_file_api_of_a_deleted_sandbox_is_not_found(
    service: FakeService, sandbox: DaytonaSandbox
) -> None:
    """Deleted in Daytona: every file API call is SandboxNotFound, never a missing file."""
    await service.sandboxes.delete(sandbox.ref.external_id)
    for call in (sandbox.list_dir(""), sandbox.stat("x"), sandbox.make_dir("d")):
        with pytest.raises(SandboxNotFound):
            await call
