"""Faults injected through the fake: lost answers, 5xx, deletion behind mango's back, pauses."""

from __future__ import annotations

import asyncio

import pytest

from mango.provider import (
    Command,
    ConfigurationError,
    OwnershipError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
)
from mango_provider_e2b import E2BProvider, E2BSandbox
from mango_provider_e2b.fake import E2BFakeService

from .conftest import SPEC, make_provider


async def test_response_dropped_after_create_gives_exactly_one_sandbox(
    fake: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """The create is committed but its answer lost: the retry finds it, nothing is made twice."""
    fake.faults.drop_after_commit(method="POST", path="/sandboxes")
    sandbox = await provider.create(session_key, SPEC)
    try:
        owned = fake.sandboxes.list(provider.ownership.labels(session_key))
        assert [record.id for record in owned] == [sandbox.ref.external_id]
        assert fake.faults.count("POST", "/sandboxes") == 1
        assert (await sandbox.exec(Command(("true",)))).exit_code == 0
    finally:
        await sandbox.destroy()


async def test_create_answered_503_is_retried_without_a_second_sandbox(
    fake: E2BFakeService, provider: E2BProvider, session_key: str
) -> None:
    """A 503 that created nothing: the next attempt looks, finds nothing, and creates once."""
    fake.faults.fail(503, method="POST", path="/sandboxes")
    sandbox = await provider.create(session_key, SPEC)
    try:
        assert len(fake.sandboxes.list(provider.ownership.labels(session_key))) == 1
        assert fake.faults.count("POST", "/sandboxes") == 2
    finally:
        await sandbox.destroy()


async def test_5xx_during_exec_keeps_the_binding(
    fake: E2BFakeService, provider: E2BProvider, sandbox: E2BSandbox, session_key: str
) -> None:
    """envd answering 503 is ProviderUnavailable; the sandbox stays and works afterwards."""
    fake.faults.fail(503, method="POST", path="/process.Process/Start")
    with pytest.raises(ProviderUnavailable) as caught:
        await sandbox.exec(Command(("true",)))
    assert not isinstance(caught.value, SandboxNotFound)
    assert fake.state(sandbox.ref.external_id) == "running"
    assert await provider.find(session_key) == sandbox.ref
    assert (await sandbox.exec(Command(("printf", "after")))).stdout == b"after"


async def test_control_plane_5xx_on_attach_is_unavailable_not_lost(
    fake: E2BFakeService, sandbox: E2BSandbox, session_key: str
) -> None:
    """GET /sandboxes/{id} answering 500 (every retry) is ProviderUnavailable, not NotFound."""
    fresh = make_provider(fake)
    try:
        fake.faults.fail(500, method="GET", path="/sandboxes/{id}", times=None)
        with pytest.raises(ProviderUnavailable) as caught:
            await fresh.attach(session_key, sandbox.ref, SPEC)
        assert not isinstance(caught.value, SandboxNotFound)
    finally:
        fake.faults.clear()
        await fresh.aclose()


async def test_sandbox_deleted_behind_mangos_back_is_lost_and_never_replaced(
    fake: E2BFakeService, provider: E2BProvider, sandbox: E2BSandbox, session_key: str
) -> None:
    """Deleted at the vendor: exec, files, the file API and attach raise SandboxNotFound; nothing
    is recreated."""
    await fake.delete_sandbox(sandbox.ref.external_id)
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(Command(("true",)))
    with pytest.raises(SandboxNotFound):
        await sandbox.read_file("anything")
    for call in (sandbox.list_dir(""), sandbox.stat("x"), sandbox.remove("x")):
        with pytest.raises(SandboxNotFound):  # the file API asks the control plane too
            await call
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, sandbox.ref, SPEC)
    assert await provider.find(session_key) is None
    assert fake.sandboxes.list(provider.ownership.labels(session_key)) == []
    await provider.destroy(session_key, sandbox.ref)  # gone is success


async def test_paused_sandbox_stays_paused_on_attach_and_keeps_its_workspace(
    fake: E2BFakeService, provider: E2BProvider, sandbox: E2BSandbox, session_key: str
) -> None:
    """A sandbox the service paused (its idle timeout): a restarted worker's attach leaves it
    paused (capability ``pause``); its first data call resumes it, and the files are there."""
    await sandbox.write_file("state/kept.txt", b"kept across pause")
    fake.pause_sandbox(sandbox.ref.external_id)
    assert await provider.find(session_key) == sandbox.ref  # find never resumes
    assert fake.state(sandbox.ref.external_id) == "paused"
    restarted = make_provider(fake)
    try:
        attached = await restarted.attach(session_key, sandbox.ref, SPEC)
        assert fake.state(sandbox.ref.external_id) == "paused"
        assert await attached.read_file("state/kept.txt") == b"kept across pause"
        assert fake.state(sandbox.ref.external_id) == "running"
    finally:
        await restarted.aclose()


async def test_keep_alive_resumes_a_paused_sandbox(
    fake: E2BFakeService, sandbox: E2BSandbox
) -> None:
    """keep_alive (called on every acquire) resumes a paused sandbox."""
    fake.pause_sandbox(sandbox.ref.external_id)
    await sandbox.keep_alive()
    assert fake.state(sandbox.ref.external_id) == "running"
    assert (await sandbox.exec(Command(("printf", "awake")))).stdout == b"awake"


async def test_cached_client_of_a_paused_sandbox_resumes_it(
    fake: E2BFakeService, sandbox: E2BSandbox
) -> None:
    """A data-plane call that meets a paused sandbox (502) resumes it once and goes on."""
    fake.pause_sandbox(sandbox.ref.external_id)
    assert (await sandbox.exec(Command(("printf", "resumed")))).stdout == b"resumed"
    assert fake.state(sandbox.ref.external_id) == "running"


async def test_idle_timeout_pauses_an_idle_sandbox(fake: E2BFakeService, session_key: str) -> None:
    """Idle past E2B_IDLE_TIMEOUT, a sandbox pauses (autoPause); keep_alive brings it back."""
    provider = make_provider(fake, idle_timeout=1.0)
    try:
        sandbox = await provider.create(session_key, SPEC)
        await sandbox.write_file("kept.txt", b"through the pause")
        assert await fake.wait_for_state(sandbox.ref.external_id, "paused", timeout=15)
        await sandbox.keep_alive()
        assert fake.state(sandbox.ref.external_id) == "running"
        assert await sandbox.read_file("kept.txt") == b"through the pause"
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_a_busy_sandbox_is_not_paused_under_a_command(
    fake: E2BFakeService, session_key: str
) -> None:
    """A command longer than the idle timeout: its sandbox's life is extended first."""
    provider = make_provider(fake, idle_timeout=1.0)
    try:
        sandbox = await provider.create(session_key, SPEC)
        created_end = fake.end_at(sandbox.ref.external_id)
        result = await sandbox.exec(Command(("sh", "-c", "sleep 2; printf done"), timeout=20))
        assert (result.stdout, result.exit_code) == (b"done", 0)
        assert fake.state(sandbox.ref.external_id) == "running"
        extended = fake.end_at(sandbox.ref.external_id)
        assert created_end is not None
        assert extended is not None
        assert (extended - created_end).total_seconds() > 20
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_wrong_api_key_is_a_configuration_error_without_the_key(
    fake: E2BFakeService, session_key: str
) -> None:
    """Refused credentials: ConfigurationError at the first call, the key never in the text."""
    provider = make_provider(fake, api_key="wrong-secret-key")
    try:
        with pytest.raises(ConfigurationError) as caught:
            await provider.health()
        assert "wrong-secret-key" not in str(caught.value)
        with pytest.raises(ConfigurationError):
            await provider.create(session_key, SPEC)
    finally:
        await provider.aclose()


async def test_foreign_key_and_foreign_namespace_are_refused(
    fake: E2BFakeService, sandbox: E2BSandbox, session_key: str
) -> None:
    """Attach and destroy check the metadata: another key or deployment is an OwnershipError."""
    other = make_provider(fake)
    try:
        with pytest.raises(OwnershipError):
            await other.attach(session_key + "-other", sandbox.ref, SPEC)
        with pytest.raises(OwnershipError):
            await other.destroy(session_key + "-other", sandbox.ref)
    finally:
        await other.aclose()
    from mango_provider_e2b.conformance import e2b_fake_options

    foreign = E2BProvider(e2b_fake_options(fake.url, fake.config), namespace="another-deployment")
    try:
        with pytest.raises(OwnershipError):
            await foreign.attach(session_key, sandbox.ref, SPEC)
        assert await foreign.find(session_key) is None
        assert await foreign.list_owned() == []
    finally:
        await foreign.aclose()
    with pytest.raises(OwnershipError):
        await other.attach(session_key, SandboxRef("docker", sandbox.ref.external_id), SPEC)


async def test_destroy_kills_running_commands(fake: E2BFakeService, sandbox: E2BSandbox) -> None:
    """Destroying a sandbox under a running exec ends that exec with cancelled=True."""
    task = asyncio.ensure_future(sandbox.exec(Command(("sleep", "300"), timeout=120)))
    assert await fake.wait_until(lambda: bool(fake.processes(sandbox.ref.external_id)), timeout=10)
    await sandbox.destroy()
    result = await asyncio.wait_for(task, 10)
    assert result.cancelled
    assert result.exit_code == -1
