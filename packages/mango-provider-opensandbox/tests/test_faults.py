"""Faults: a lost create response, 5xx during exec, a sandbox deleted behind mango's back
(idle, or while a command runs in it), egress drift repaired on attach, and absent or wrong
credentials.

SessionManager runs on the project's in-memory BindingStore here (the
PostgreSQL store's own behaviour is proven in mango-core); the provider talks
to the fake over real HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.provider import (
    Command,
    ConfigurationError,
    ExecResult,
    NetworkMode,
    OutputChunk,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxSpec,
)
from mango.provider.execution import TEARDOWN_SETTLE_SECONDS
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.layout import EXECD_PORT
from mango_provider_opensandbox.sandbox import OpenSandboxSandbox
from mango_provider_opensandbox.settings import REGISTRATION, read_settings

SPEC = SandboxSpec(timeout=60)
SANDBOX_ROUTE = "/v1/sandboxes/{id}"
"""The lifecycle ``GET`` of one sandbox (what a teardown probe asks)."""
RUNNING = Command(("sh", "-c", "echo started > ready; exec sleep 30"))


def _manager(provider: OpenSandboxProvider, store: InMemoryBindingStore) -> SessionManager:
    return SessionManager(provider, store, REGISTRATION.capabilities, REGISTRATION.quirks)


async def _wait_for_file(sandbox: OpenSandboxSandbox, name: str) -> None:
    """Until ``name`` exists in the workspace (the command is running)."""
    for _ in range(1000):
        try:
            await sandbox.read_file(name)
        except FileNotFoundError:
            await asyncio.sleep(0.01)
        else:
            return
    raise AssertionError(f"{name} never appeared")


async def _run(sandbox: OpenSandboxSandbox, command: Command, *, streamed: bool) -> ExecResult:
    """``exec``, or ``exec_stream`` read to its final result."""
    if not streamed:
        return await sandbox.exec(command)
    async with sandbox.exec_stream(command) as events:
        async for event in events:
            if not isinstance(event, OutputChunk):
                return event
    raise AssertionError("the stream ended without a result")


def _command_path(sandbox_id: str, server_proxy: bool) -> str:
    if server_proxy:
        return f"/v1/sandboxes/{sandbox_id}/proxy/{EXECD_PORT}/command"
    return f"/direct/{sandbox_id}/{EXECD_PORT}/command"


async def test_lost_create_response_adopts_the_created_sandbox(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """The server made the sandbox but the answer was lost: the retry listing adopts it."""
    provider = make_provider()
    fake.faults.drop_after_commit(method="POST", path="/v1/sandboxes")
    sandbox = await provider.create("lost-create", SPEC)
    labels = provider.ownership.labels("lost-create")
    assert [record.id for record in fake.service.sandboxes.list(labels)] == [
        sandbox.ref.external_id
    ]
    assert fake.faults.count("POST", "/v1/sandboxes") == 1
    assert (await sandbox.exec(Command(("echo", "adopted")))).stdout == b"adopted\n"
    again = await make_provider().create("lost-create", SPEC)
    assert again.ref == sandbox.ref


async def test_5xx_during_exec_keeps_the_binding(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider], server_proxy: bool
) -> None:
    """A 503 on the command is retryable and leaves the binding alone; the next exec works."""
    store = InMemoryBindingStore()
    manager = _manager(make_provider(), store)
    await manager.ensure_session("exec-5xx")
    sandbox = await manager.acquire("exec-5xx", SPEC)
    fake.faults.fail(503, method="POST", path=_command_path(sandbox.ref.external_id, server_proxy))
    with pytest.raises(ProviderUnavailable):
        await sandbox.exec(Command(("true",)))
    binding = await store.get_binding("exec-5xx")
    assert binding is not None
    assert not binding.lost
    assert (await sandbox.exec(Command(("echo", "again")))).stdout == b"again\n"


async def test_sandbox_deleted_behind_our_back_is_lost_never_replaced(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """Exec reports the loss, it is persisted, and no worker creates an empty replacement."""
    store = InMemoryBindingStore()
    manager = _manager(make_provider(), store)
    await manager.ensure_session("deleted")
    sandbox = await manager.acquire("deleted", SPEC)
    await sandbox.write_file("work.txt", b"precious")
    await fake.delete(sandbox.ref.external_id)
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(Command(("cat", "work.txt")))
    binding = await store.get_binding("deleted")
    assert binding is not None
    assert binding.lost
    for fresh in (manager, _manager(make_provider(), store)):
        with pytest.raises(SandboxNotFound):
            await fresh.acquire("deleted", SPEC)
    assert fake.faults.count("POST", "/v1/sandboxes") == 1
    await manager.release("deleted")
    assert await store.get_binding("deleted") is None


@pytest.mark.parametrize("streamed", [False, True], ids=["exec", "exec_stream"])
async def test_destroy_by_another_worker_cancels_a_running_command(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider], streamed: bool
) -> None:
    """Worker B deletes the sandbox while A's ``sleep 30`` runs: A returns cancelled, promptly."""
    sandbox = await make_provider().create("elsewhere", SPEC)
    task = asyncio.ensure_future(_run(sandbox, RUNNING, streamed=streamed))
    await _wait_for_file(sandbox, "ready")
    started = time.monotonic()
    await make_provider().destroy("elsewhere", sandbox.ref)
    result = await asyncio.wait_for(task, 10)
    assert (result.cancelled, result.exit_code, result.timed_out) == (True, -1, False)
    # The lifecycle API said "gone" at once: no settling, no waiting for sleep.
    assert time.monotonic() - started < TEARDOWN_SETTLE_SECONDS
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(Command(("true",)))


async def test_a_command_ending_on_its_own_asks_nothing(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """Completion, an exit code and ``kill -9 $$`` keep their status with no lifecycle call."""
    sandbox = await make_provider().create("own-end", SPEC)
    gets = fake.faults.count("GET", SANDBOX_ROUTE)
    results = [
        await sandbox.exec(Command(("sh", "-c", script)))
        for script in ("echo ok", "exit 7", "kill -9 $$")
    ]
    assert [(result.exit_code, result.cancelled) for result in results] == [
        (0, False),
        (7, False),
        (137, False),
    ]
    assert fake.faults.count("GET", SANDBOX_ROUTE) == gets


async def test_killed_in_a_live_sandbox_is_not_cancelled(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """Someone else interrupts the command (execd's -1): the sandbox is asked about, and lives."""
    sandbox = await make_provider().create("interrupted", SPEC)
    sandbox_id = sandbox.ref.external_id
    task = asyncio.ensure_future(sandbox.exec(RUNNING))
    await _wait_for_file(sandbox, "ready")
    [command_id] = list(fake._commands)
    gets = fake.faults.count("GET", SANDBOX_ROUTE)
    async with httpx.AsyncClient() as client:
        response = await client.delete(
            f"{fake.url}/v1/sandboxes/{sandbox_id}/proxy/{EXECD_PORT}/command",
            params={"id": command_id},
        )
    assert response.status_code == 200
    result = await asyncio.wait_for(task, 10)
    assert (result.exit_code, result.cancelled, result.timed_out) == (-1, False, False)
    assert fake.faults.count("GET", SANDBOX_ROUTE) > gets
    assert (await sandbox.exec(Command(("echo", "usable")))).stdout == b"usable\n"


async def test_egress_drift_is_repaired_on_attach(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """The final list is bound; drift behind mango's back is undone when a worker attaches.

    (No packages here: the fake's commands are host processes. The order with
    packages is proven in mango-core on PostgreSQL.)
    """
    store = InMemoryBindingStore()
    spec = SandboxSpec(
        timeout=60, network=NetworkMode.LIMITED, network_allowed_hosts=("api.example.test",)
    )
    manager = _manager(make_provider(), store)
    await manager.ensure_session("drift")
    sandbox = await manager.acquire("drift", spec)
    sandbox_id = sandbox.ref.external_id
    policy = fake.policy(sandbox_id)
    assert policy is not None
    assert [rule["target"] for rule in policy["egress"]] == ["api.example.test"]
    writes = fake.faults.count("PATCH") + fake.faults.count("DELETE")
    fake.set_policy(
        sandbox_id,
        {"defaultAction": "deny", "egress": [{"action": "allow", "target": "evil.example.test"}]},
    )
    restarted = _manager(make_provider(), store)
    await restarted.acquire("drift", spec)
    policy = fake.policy(sandbox_id)
    assert policy is not None
    assert [rule["target"] for rule in policy["egress"]] == ["api.example.test"]
    assert fake.faults.count("PATCH") + fake.faults.count("DELETE") == writes + 2
    # The cached client does not ask again while the allowlist is unchanged.
    reads = fake.faults.count("GET")
    await restarted.acquire("drift", spec)
    assert fake.faults.count("GET") == reads


async def test_credentials_absent_or_wrong_are_clear_and_never_echoed(
    fake: FakeOpenSandbox, namespace: str
) -> None:
    """No key or a wrong one: ConfigurationError naming neither the key nor a header value."""
    secret = "wrong-secret-value-1234"  # noqa: S105 - a made-up key the fake refuses
    for key in (None, secret):
        provider = OpenSandboxProvider(fake.url, api_key=key, namespace=namespace)
        try:
            with pytest.raises(ConfigurationError) as info:
                await provider.health()
            with pytest.raises(ConfigurationError):
                await provider.create("creds", SPEC)
        finally:
            await provider.aclose()
        text = f"{info.value} {info.value.hint} {info.value!r} {provider!r}"
        assert secret not in text
        assert fake.api_key not in text
    with pytest.raises(ConfigurationError, match="OPEN_SANDBOX_DOMAIN"):
        read_settings({"OPEN_SANDBOX_API_KEY": secret})
    settings = read_settings({"OPEN_SANDBOX_DOMAIN": fake.url, "OPEN_SANDBOX_API_KEY": secret})
    assert secret not in repr(settings)
