"""Activities alone (ActivityEnvironment), on the local provider and real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import attrs
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from mango.app import SessionManager
from mango.domain import (
    Binding,
    CapabilitySet,
    InvalidInput,
    ProviderRegistration,
    ProviderUnavailable,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SupportLevel,
    spec_hash,
)
from mango.domain.ports import BindingStore, Provider, Sandbox
from mango.domain.registry import SettingSpec
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore
from mango.temporal import MangoActivities, ToolCall
from mango.temporal.activities import DEFAULT_BLOB_LIMIT
from mango.temporal.messages import (
    AcquireInput,
    HealthInput,
    ReadFileInput,
    ReconcileInput,
    ReleaseInput,
    ToolStepInput,
    WriteFileInput,
)

from .support import session_dirs, wait_until

pytestmark = pytest.mark.postgres


def activities(provider: Provider, store: BindingStore, **options: Any) -> MangoActivities:
    """Activities over a fresh SessionManager (a fresh worker)."""
    return MangoActivities(
        SessionManager(provider, store), store, heartbeat_interval=0.05, **options
    )


def bash(session_id: str, command: str) -> ToolStepInput:
    """A bash tool step."""
    return ToolStepInput(session_id=session_id, call=ToolCall("bash", {"command": command}))


async def fails_with(
    awaitable: Awaitable[object], type_name: str, *, non_retryable: bool
) -> ApplicationError:
    """Await ``awaitable``; it must fail with an ApplicationError of that type and verdict."""
    with pytest.raises(ApplicationError) as caught:
        await awaitable
    error = caught.value
    assert (error.type, error.non_retryable) == (type_name, non_retryable), error
    return error


async def test_acquire_provisions_once_and_tool_steps_reuse_it(
    store: PostgresBindingStore, local_provider: LocalProvider, sandbox_dir: Path
) -> None:
    """Acquire binds one sandbox; tool steps from a fresh worker use the same one."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    first = await env.run(activities(local_provider, store).acquire_sandbox, AcquireInput("s1"))
    again = await env.run(activities(local_provider, store).acquire_sandbox, AcquireInput("s1"))
    assert first.ref == again.ref
    result = await env.run(activities(local_provider, store).execute_tool, bash("s1", "echo hi"))
    assert result.exec_result is not None
    assert result.exec_result.stdout == b"hi\n"
    assert len(session_dirs(sandbox_dir)) == 1
    binding = await store.get_binding("s1")
    assert binding is not None
    assert binding.ref == first.ref


async def test_long_steps_heartbeat(
    store: PostgresBindingStore, local_provider: LocalProvider
) -> None:
    """A step that outlasts the heartbeat interval heartbeats while it runs."""
    env = ActivityEnvironment()
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    await store.ensure_session("s1")
    await env.run(activities(local_provider, store).execute_tool, bash("s1", "sleep 0.4"))
    assert len(beats) >= 2


async def test_malformed_tool_call_is_non_retryable_and_provisions_nothing(
    store: PostgresBindingStore, local_provider: LocalProvider, sandbox_dir: Path
) -> None:
    """Invalid arguments fail the step at once, before any sandbox exists."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    bad = ToolStepInput(session_id="s1", call=ToolCall("bash", {"command": ["ls"]}))
    error = await fails_with(
        env.run(activities(local_provider, store).execute_tool, bad),
        "InvalidInput",
        non_retryable=True,
    )
    assert "arguments.command" in error.message
    assert session_dirs(sandbox_dir) == []
    assert await store.get_intent("s1") is None


async def test_missing_or_fenced_session_is_refused(
    store: PostgresBindingStore, local_provider: LocalProvider
) -> None:
    """No work for a Session that does not exist or is being deleted."""
    env = ActivityEnvironment()
    acts = activities(local_provider, store)
    await fails_with(
        env.run(acts.execute_tool, bash("ghost", "true")), "InvalidInput", non_retryable=True
    )
    await store.ensure_session("s1")
    await env.run(acts.execute_tool, bash("s1", "true"))
    await store.fence_session("s1")
    await fails_with(
        env.run(acts.execute_tool, bash("s1", "true")), "SessionDeleting", non_retryable=True
    )


async def test_lost_sandbox_fails_non_retryably_and_is_not_replaced(
    store: PostgresBindingStore, local_provider: LocalProvider, sandbox_dir: Path
) -> None:
    """A bound sandbox that vanished is a non-retryable SandboxNotFound; nothing is recreated."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    await env.run(activities(local_provider, store).acquire_sandbox, AcquireInput("s1"))
    [directory] = session_dirs(sandbox_dir)
    shutil.rmtree(directory)
    fresh = activities(local_provider, store)
    error = await fails_with(
        env.run(fresh.execute_tool, bash("s1", "true")), "SandboxNotFound", non_retryable=True
    )
    assert "no longer exists" in error.message
    assert "delete the session" in error.details[0]
    assert session_dirs(sandbox_dir) == []
    assert await store.get_binding("s1") is not None


@attrs.define
class Unreachable:
    """A provider whose backend cannot be reached."""

    name: str = "local"
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet)

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        raise ProviderUnavailable("backend down")

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        raise ProviderUnavailable("backend down")

    async def health(self) -> str:
        raise ProviderUnavailable("backend down")

    async def aclose(self) -> None:
        return None


async def test_provider_unavailable_is_retryable(store: PostgresBindingStore) -> None:
    """A transient backend failure stays retryable; the health probe calls it unreachable."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    acts = activities(Unreachable(), store)
    await fails_with(
        env.run(acts.acquire_sandbox, AcquireInput("s1")),
        "ProviderUnavailable",
        non_retryable=False,
    )
    health = await env.run(acts.provider_health, HealthInput())
    assert (health.reachable, health.ok) == (False, False)
    assert "backend down" in health.detail


async def test_another_providers_binding_is_a_permanent_explained_error(
    store: PostgresBindingStore, local_provider: LocalProvider
) -> None:
    """A binding of provider 'alt' is OwnershipError here, naming the worker to run."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    spec = SandboxSpec()
    await store.put_intent(ProvisioningIntent("s1", "alt", spec, spec_hash(spec)))
    await store.put_binding(Binding("s1", SandboxRef("alt", "alt-1"), spec_hash(spec)))
    acts = activities(local_provider, store)
    error = await fails_with(
        env.run(acts.execute_tool, bash("s1", "true")), "OwnershipError", non_retryable=True
    )
    assert "MANGO_SANDBOX=alt" in error.details[0]
    await fails_with(
        env.run(acts.release_sandbox, ReleaseInput("s1")), "OwnershipError", non_retryable=True
    )


async def test_cancelling_the_activity_kills_the_command(
    store: PostgresBindingStore, local_provider: LocalProvider, tmp_path: Path
) -> None:
    """Activity cancellation cancels the exec and its process before the activity ends."""
    env = ActivityEnvironment()
    await store.ensure_session("s1")
    acts = activities(local_provider, store)
    sandbox = await acts.manager.acquire("s1", SandboxSpec())
    pid_file = Path(sandbox.root) / "pid"
    step = asyncio.ensure_future(
        env.run(acts.execute_tool, bash("s1", "echo $$ > pid; exec sleep 60"))
    )

    async def started() -> bool:
        return bool(pid_file.exists() and pid_file.read_text().strip())

    await wait_until(started, 10, "the command to start")
    pid = int(pid_file.read_text())
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(step, 10)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_read_file_is_bounded_by_what_fits_a_payload(
    store: PostgresBindingStore, local_provider: LocalProvider
) -> None:
    """ReadFile reads at most what its result can carry; beyond it the error says why.

    Without a client the activity assumes Temporal's default limit (2 MiB).
    The largest file that fits is read and its result encodes within the
    budget; one byte more is a final FileTooLarge naming the payload limit,
    before any of it is carried. A smaller ``max_bytes`` is the bound instead.
    """
    env = ActivityEnvironment()
    acts = activities(local_provider, store)
    await store.ensure_session("s1")
    fits = await acts._read_budget()
    assert DEFAULT_BLOB_LIMIT // 2 < fits < DEFAULT_BLOB_LIMIT
    data = os.urandom(fits)
    await env.run(acts.write_file, WriteFileInput("s1", "big", data))
    output = await env.run(acts.read_file, ReadFileInput("s1", "big"))
    assert output.data == data
    assert await acts._payload_size(output) <= await acts._payload_budget()

    await env.run(acts.write_file, WriteFileInput("s1", "bigger", data + b"x"))
    error = await fails_with(
        env.run(acts.read_file, ReadFileInput("s1", "bigger")), "FileTooLarge", non_retryable=True
    )
    assert "Temporal's payload limit" in str(error)
    error = await fails_with(
        env.run(acts.read_file, ReadFileInput("s1", "big", max_bytes=10)),
        "FileTooLarge",
        non_retryable=True,
    )
    assert "payload" not in str(error)
    assert (await env.run(acts.read_file, ReadFileInput("s1", "big", max_bytes=fits))).data == data
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidInput, match="max_bytes"):
            ReadFileInput("s1", "big", max_bytes=bad)  # type: ignore[arg-type]


async def test_files_release_and_reconcile(
    store: PostgresBindingStore, local_provider: LocalProvider, sandbox_dir: Path
) -> None:
    """Files round-trip as bytes; release is idempotent; reconcile finishes a leftover intent."""
    env = ActivityEnvironment()
    acts = activities(local_provider, store)
    await store.ensure_session("s1")
    data = bytes(range(256))
    written = await env.run(acts.write_file, WriteFileInput("s1", "bin/data", data))
    assert written.size == 256
    assert (await env.run(acts.read_file, ReadFileInput("s1", "bin/data"))).data == data
    await fails_with(
        env.run(acts.read_file, ReadFileInput("s1", "nope")), "InvalidInput", non_retryable=True
    )
    await env.run(acts.release_sandbox, ReleaseInput("s1"))
    await env.run(acts.release_sandbox, ReleaseInput("s1"))
    assert session_dirs(sandbox_dir) == []
    assert await store.get_binding("s1") is None

    await store.ensure_session("s2")
    spec = SandboxSpec()
    await store.put_intent(ProvisioningIntent("s2", "local", spec, spec_hash(spec)))
    report = await env.run(acts.reconcile_provisioning, ReconcileInput())
    assert (report.attempted, report.completed, report.failures) == (1, 1, ())
    assert await store.get_intent("s2") is None
    assert await store.get_binding("s2") is not None


async def test_health_reports_presence_of_credentials_never_values(
    store: PostgresBindingStore, local_provider: LocalProvider
) -> None:
    """Health says whether each secret is set, and which required setting is missing."""
    registration = ProviderRegistration(
        name="local",
        capabilities=CapabilitySet(),
        support_level=SupportLevel.DEVELOPMENT,
        settings=(
            SettingSpec("FAKE_API_KEY", "key", secret=True, required=True),
            SettingSpec("FAKE_TOKEN", "token", secret=True),
            SettingSpec("FAKE_REGION", "region", required=True),
        ),
        factory=lambda _context: local_provider,
    )
    environ = {"FAKE_API_KEY": "s3cr3t-value"}
    acts = activities(local_provider, store, registration=registration, environ=environ)
    health = await ActivityEnvironment().run(acts.provider_health, HealthInput())
    assert health.reachable
    assert "writable" in health.detail
    assert [(c.env, c.present) for c in health.credentials] == [
        ("FAKE_API_KEY", True),
        ("FAKE_TOKEN", False),
    ]
    assert health.missing_settings == ("FAKE_REGION",)
    assert not health.ok
    assert "s3cr3t-value" not in repr(health)


async def test_health_of_an_unreachable_docker_daemon(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """The worker's health report makes the provider's real round trip: no daemon, unreachable."""
    from mango_provider_docker import DockerProvider

    provider = DockerProvider(tmp_path / "resources", host="unix:///nonexistent")
    try:
        health = await ActivityEnvironment().run(
            activities(provider, store).provider_health, HealthInput()
        )
    finally:
        await provider.aclose()
    assert (health.reachable, health.ok) == (False, False)
    assert health.detail.startswith("unreachable:")
    assert "Docker Engine" in health.detail
