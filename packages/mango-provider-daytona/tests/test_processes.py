"""Background processes on the fake Daytona: each in a session of its own, released by a kill."""

from __future__ import annotations

from mango.fakes import FakeService
from mango.provider import Command, ProcessState
from mango_provider_daytona import DaytonaSandbox
from mango_provider_daytona.fake import DaytonaFake
from mango_provider_daytona.sandbox import SESSION_PREFIX


async def test_a_process_runs_in_its_own_session_until_killed(
    sandbox: DaytonaSandbox, service: FakeService, fake: DaytonaFake
) -> None:
    """The session mango-<id> holds the supervisor; a kill ends the tree and deletes it."""
    record = service.sandboxes.get(sandbox.ref.external_id)
    first = await sandbox.start(Command(("sh", "-c", "exec cat")))
    second = await sandbox.start(Command(("sh", "-c", "exec cat")))
    sessions = record.extra["sessions"]
    assert {SESSION_PREFIX + first.id, SESSION_PREFIX + second.id} <= set(sessions)
    killed = await sandbox.kill(first.id)
    assert killed.state is ProcessState.KILLED
    assert SESSION_PREFIX + first.id not in sessions
    assert (await sandbox.wait(second.id, timeout=0)).state is ProcessState.RUNNING


async def test_a_stopped_sandbox_takes_its_processes_along(
    sandbox: DaytonaSandbox, fake: DaytonaFake
) -> None:
    """Daytona stops the container: after a start the process reads killed (no exit code)."""
    handle = await sandbox.start(Command(("sh", "-c", "exec cat")))
    fake.set_state(sandbox.ref.external_id, "stopped")
    fake.set_state(sandbox.ref.external_id, "started")
    info = await sandbox.wait(handle.id, timeout=0)
    assert (info.state, info.exit_code) == (ProcessState.KILLED, None)
