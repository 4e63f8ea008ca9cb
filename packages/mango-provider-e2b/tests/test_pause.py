"""Pause and resume on the fake, in E2B and Cube mode: frozen processes, cut streams, take-up.

The fake does what a memory snapshot of the VM does: every process of the
sandbox stops where it is, every envd stream of the sandbox is cut, envd's
``Connect`` takes a stream up after the resume, and a data call while paused
is the edge's 502. The workspace is reached from the host here (the fake's
sandboxes are host directories), so the freeze is seen without asking the
paused sandbox anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.provider import Command, OwnershipError, SandboxNotFound, SandboxNotRunning
from mango_provider_e2b import E2BSandbox
from mango_provider_e2b.fake import E2BFakeService
from mango_provider_e2b.settings import REGISTRATION as E2B_REGISTRATION

from .conftest import SPEC, make_provider

WAIT = "echo up > started; while [ ! -e go ]; do sleep 0.01; done; touch seen; echo done"
BOUND = 30.0


@pytest.fixture(params=["e2b", "cube"])
def service(request: pytest.FixtureRequest) -> E2BFakeService:
    """The fake in each mode."""
    fixture = "fake" if request.param == "e2b" else "cube_fake"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


def _root(service: E2BFakeService, sandbox: E2BSandbox) -> Path:
    return Path(service.sandboxes.get(sandbox.sandbox_id).local.root)


async def test_a_paused_command_is_frozen_and_taken_up_after_the_resume(
    service: E2BFakeService,
) -> None:
    """While paused, every process of the sandbox is stopped (``/proc`` says ``T``) and its
    exec neither ends nor fails; a file read is refused, not a resume; the resume returns once
    the exec has taken its stream up, and the command then ends with its output."""
    provider = make_provider(service)
    try:
        sandbox = await provider.create("frozen", SPEC)
        root = _root(service, sandbox)
        record = service.sandboxes.get(sandbox.sandbox_id)
        async with record.beacon("started") as started:
            frozen = asyncio.create_task(sandbox.exec(Command(("sh", "-c", WAIT))))
            await started.wait(BOUND)
        await sandbox.pause()
        assert service.state(sandbox.sandbox_id) == "paused"
        pids = [
            pid
            for pid, process in service.processes(sandbox.sandbox_id).items()
            if process.process.returncode is None
        ]
        assert pids
        # One still in the kernel (state D) stops on its way out: wait for that, bounded.
        for _ in range(int(BOUND * 100)):
            if all(_halted(pid) for pid in pids):
                break
            await asyncio.sleep(0.01)
        states = {pid: (_state(pid), _children_states(pid)) for pid in pids}
        assert all(_halted(pid) for pid in pids), f"a paused sandbox's process runs: {states}"
        with pytest.raises(SandboxNotRunning):
            await sandbox.read_file("started")
        assert service.state(sandbox.sandbox_id) == "paused", "a data call undid the pause"
        assert not frozen.done(), "the paused sandbox's command ended"
        await sandbox.resume()
        assert not await sandbox.is_paused()
        assert b"T" not in {_state(pid) for pid in pids}
        (root / "go").touch()
        result = await asyncio.wait_for(frozen, BOUND)
        assert (result.exit_code, result.stdout) == (0, b"done\n")
        await sandbox.destroy()
    finally:
        await provider.aclose()


def _state(pid: int) -> bytes:
    """The ``/proc`` state letter of ``pid`` (empty once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return b""
    return status.rsplit(b")", 1)[1].split()[0]


def _children_states(pid: int) -> list[bytes]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return []
    return [_state(int(child)) for child in children]


def _halted(pid: int) -> bool:
    """Stopped (``T``) or gone; or a shell that ``vfork``-ed a child the pause stopped before
    its ``exec``: the parent waits in the kernel (``D``) until that child goes on, so it
    cannot stop itself, but it runs no more than the child does."""
    state = _state(pid)
    return state in (b"T", b"") or (state == b"D" and b"T" in _children_states(pid))


async def test_pause_by_reference_checks_the_owner_and_attach_keeps_it_paused(
    service: E2BFakeService,
) -> None:
    """The provider's pause and resume check the metadata first; a fresh provider's attach
    of a paused sandbox leaves it paused; a deleted one is SandboxNotFound."""
    provider, fresh = make_provider(service), make_provider(service)
    try:
        sandbox = await provider.create("owner", SPEC)
        with pytest.raises(OwnershipError):
            await provider.pause("someone-else", sandbox.ref)
        assert service.state(sandbox.sandbox_id) == "running"
        await provider.pause("owner", sandbox.ref)
        await provider.pause("owner", sandbox.ref)  # idempotent (the 409)
        attached = await fresh.attach("owner", sandbox.ref, SPEC)
        assert await attached.is_paused()
        await fresh.resume("owner", sandbox.ref)
        await fresh.resume("owner", sandbox.ref)  # idempotent
        assert (await attached.exec(Command(("echo", "up")))).stdout == b"up\n"
        await service.delete_sandbox(sandbox.sandbox_id)
        for call in (provider.pause, provider.resume):
            with pytest.raises(SandboxNotFound):
                await call("owner", sandbox.ref)
    finally:
        await provider.aclose()
        await fresh.aclose()


async def test_session_manager_pauses_and_an_acquire_resumes(service: E2BFakeService) -> None:
    """``SessionManager.pause`` marks the Session paused and pauses the sandbox, freezing a
    running command; the next acquire resumes it, the command takes its stream up and ends
    with its output, and the mark goes."""
    registration = E2B_REGISTRATION  # Cube's declares the same capabilities
    store = InMemoryBindingStore()
    provider = make_provider(service)
    manager = SessionManager(provider, store, registration.capabilities, registration.quirks)
    try:
        await manager.ensure_session("paused-session")
        sandbox = await manager.acquire("paused-session", SPEC)
        record = service.sandboxes.get(sandbox.ref.external_id)
        async with record.beacon("started") as started:
            frozen = asyncio.create_task(sandbox.exec(Command(("sh", "-c", WAIT))))
            await started.wait(BOUND)
        await manager.pause("paused-session")
        session = await store.get_session("paused-session")
        assert session is not None
        assert session.paused
        assert service.state(sandbox.ref.external_id) == "paused"
        assert not frozen.done()
        again = await manager.acquire("paused-session", SPEC)
        assert again.ref == sandbox.ref
        assert service.state(sandbox.ref.external_id) == "running"
        await again.write_file("go", b"")
        result = await asyncio.wait_for(frozen, BOUND)
        assert (result.exit_code, result.stdout) == (0, b"done\n")
        session = await store.get_session("paused-session")
        assert session is not None
        assert not session.paused
        await manager.release("paused-session")
    finally:
        await provider.aclose()
