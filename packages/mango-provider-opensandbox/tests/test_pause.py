"""Pause and resume on the fake: the processes of a paused sandbox are frozen, not killed.

The fake does what the server's Docker runtime does (``container.pause()``,
the cgroup freezer): every process of the sandbox stops where it is and
keeps its memory, a command's event stream stalls and goes on after the
resume, and a data-plane call made meanwhile waits for the resume (the
kernel accepts the connection of a frozen execd). The workspace is reached
from the host here (the fake's sandboxes are host directories), so the
freeze is seen without asking the paused sandbox anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.provider import Command, OwnershipError, SandboxNotFound, SandboxRef, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.settings import REGISTRATION

WAIT = "echo up > started; while [ ! -e go ]; do sleep 0.01; done; touch seen; echo done"
BOUND = 30.0


async def test_a_paused_command_is_frozen_and_ends_after_the_resume(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """A command waiting for ``go`` misses it while paused (a running twin sees its own and
    ends), its exec neither ends nor fails, a file read waits; after the resume both finish."""
    provider = make_provider()
    sandbox = await provider.create("frozen", SandboxSpec(timeout=60))
    clock = await provider.create("clock", SandboxSpec(timeout=60))
    record, twin = fake.sandbox(sandbox.ref.external_id), fake.sandbox(clock.ref.external_id)
    root, clock_root = Path(record.local.root), Path(twin.local.root)
    await sandbox.write_file("kept.txt", b"kept")
    async with record.beacon("started") as started, twin.beacon("started") as clock_started:
        frozen = asyncio.create_task(sandbox.exec(Command(("sh", "-c", WAIT))))
        running = asyncio.create_task(clock.exec(Command(("sh", "-c", WAIT))))
        await started.wait(BOUND)
        await clock_started.wait(BOUND)
    await sandbox.pause()
    assert fake.phase(record) == "Paused"
    assert await sandbox.is_paused()
    held = asyncio.create_task(sandbox.read_file("kept.txt"))
    (root / "go").touch()  # behind the pause, straight into the workspace
    (clock_root / "go").touch()
    result = await asyncio.wait_for(running, BOUND)  # the twin polled, saw it, ended
    assert (result.exit_code, result.stdout) == (0, b"done\n")
    assert not (root / "seen").exists(), "a paused sandbox's command ran on"
    assert not frozen.done(), "the paused sandbox's command ended"
    assert not held.done(), "a paused sandbox's execd answered"
    await sandbox.resume()
    assert not await sandbox.is_paused()
    assert await asyncio.wait_for(held, BOUND) == b"kept"
    result = await asyncio.wait_for(frozen, BOUND)
    assert (result.exit_code, result.stdout) == (0, b"done\n")
    await sandbox.destroy()
    await clock.destroy()


async def test_pause_by_reference_checks_the_owner_and_attach_keeps_it_paused(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """The provider's pause and resume check the metadata first; a fresh worker's attach
    of a paused sandbox leaves it paused; a deleted one is SandboxNotFound."""
    provider = make_provider()
    sandbox = await provider.create("owner", SandboxSpec(timeout=30))
    with pytest.raises(OwnershipError):
        await provider.pause("someone-else", sandbox.ref)
    assert fake.phase(fake.sandbox(sandbox.ref.external_id)) == "Running"
    await provider.pause("owner", sandbox.ref)
    await provider.pause("owner", sandbox.ref)  # idempotent
    attached = await make_provider().attach("owner", sandbox.ref, SandboxSpec(timeout=30))
    assert await attached.is_paused()
    await provider.resume("owner", sandbox.ref)
    await provider.resume("owner", sandbox.ref)  # idempotent
    assert (await attached.exec(Command(("echo", "up")))).stdout == b"up\n"
    await fake.delete(sandbox.ref.external_id)
    for call in (provider.pause, provider.resume):
        with pytest.raises(SandboxNotFound):
            await call("owner", sandbox.ref)
    with pytest.raises(SandboxNotFound):
        await provider.pause("owner", SandboxRef("opensandbox", "no-such-sandbox"))


async def test_a_request_held_by_a_pause_sees_the_delete(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """A paused sandbox deleted meanwhile: the waiting call fails as a lost sandbox."""
    provider = make_provider()
    sandbox = await provider.create("held", SandboxSpec(timeout=30))
    await sandbox.write_file("kept.txt", b"kept")
    await sandbox.pause()
    held = asyncio.create_task(sandbox.read_file("kept.txt"))
    await fake.delete(sandbox.ref.external_id)
    with pytest.raises(SandboxNotFound):
        await asyncio.wait_for(held, BOUND)


async def test_session_manager_pauses_and_an_acquire_resumes(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """``SessionManager.pause`` marks the Session paused and pauses the sandbox; a fresh
    worker's acquire resumes it with its workspace, and the mark goes."""
    store = InMemoryBindingStore()
    spec = SandboxSpec(timeout=30)

    def manager() -> SessionManager:
        return SessionManager(
            make_provider(), store, REGISTRATION.capabilities, REGISTRATION.quirks
        )

    first = manager()
    await first.ensure_session("paused-session")
    sandbox = await first.acquire("paused-session", spec)
    await sandbox.write_file("kept.txt", b"kept")
    await first.pause("paused-session")
    record = await store.get_session("paused-session")
    assert record is not None
    assert record.paused
    assert fake.phase(fake.sandbox(sandbox.ref.external_id)) == "Paused"
    again = await manager().acquire("paused-session", spec)
    assert again.ref == sandbox.ref
    assert fake.phase(fake.sandbox(sandbox.ref.external_id)) == "Running"
    assert await again.read_file("kept.txt") == b"kept"
    record = await store.get_session("paused-session")
    assert record is not None
    assert not record.paused
