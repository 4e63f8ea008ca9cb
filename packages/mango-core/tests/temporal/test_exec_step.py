"""The ``Exec`` step: ``mango exec --via-temporal`` gives the direct path's result, is
cancelled with its caller, waits visibly while the provider is down and gives up on a bound."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from mango.app import SessionManager
from mango.domain import (
    CapabilityNotSupported,
    Command,
    PackagePlan,
    ProviderUnavailable,
    SandboxSpec,
)
from mango.local import LocalProvider
from mango.plugins import load_plugins
from mango.postgres import PostgresBindingStore
from mango.temporal import MangoActivities, session_workflow_id
from mango.temporal.activities import DEFAULT_BLOB_LIMIT
from mango.temporal.client import Waiting
from mango.temporal.messages import ExecStepInput, ToolCall
from mango.temporal.payloads import data_converter

from .support import FAST_POLICY, Harness, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

# The fixture's local provider caps each stream at 64 KiB; this prints more on both.
SCRIPT = (
    "cat; head -c 100000 /dev/zero | tr '\\0' o; head -c 70000 /dev/zero | tr '\\0' e >&2; exit 3"
)
NOISY = Command(
    ("sh", "-c", SCRIPT),
    stdin=bytes(range(256)) * 4,
)


async def test_exec_step_gives_the_direct_result(harness: Harness) -> None:
    """Same bytes, same cap and flags, same exit code as the sandbox called directly."""
    session = harness.sid("parity")
    async with harness.worker():
        durable = await harness.orchestrator.exec(session, NOISY)
    manager = SessionManager(harness.provider, harness.store)
    await manager.ensure_session(harness.sid("direct"))
    direct = await (await manager.acquire(harness.sid("direct"), SandboxSpec())).exec(NOISY)
    assert durable == direct
    assert (durable.exit_code, durable.stdout_truncated, durable.stderr_truncated) == (
        3,
        True,
        True,
    )
    assert len(durable.stdout) == 64 * 1024
    assert durable.stdout.startswith(bytes(range(256)) * 4 + b"o")


async def test_local_activity_steps_give_the_same_result(harness: Harness) -> None:
    """A short, bounded step runs as a local activity; its result does not change."""
    never_local = harness.orchestrator_with(
        policy=attrs.evolve(harness.orchestrator.policy, local_exec_limit=0.0)
    )
    bounded = Command(NOISY.argv, stdin=NOISY.stdin, timeout=5.0)
    async with harness.worker():
        local = await harness.orchestrator.exec(harness.sid("local"), bounded)
        normal = await never_local.exec(harness.sid("normal"), bounded)
        unbounded = await harness.orchestrator.exec(harness.sid("unbounded"), NOISY)
    assert local == normal == unbounded

    async def markers(name: str) -> int:
        handle = harness.client.get_workflow_handle(session_workflow_id(harness.sid(name)))
        history = await handle.fetch_history()
        return sum(e.HasField("marker_recorded_event_attributes") for e in history.events)

    assert await markers("local") == 1  # the step ran as a local activity
    assert await markers("normal") == 0
    assert await markers("unbounded") == 0


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["activity", "local-activity"])
async def test_cancelling_the_caller_kills_the_command(
    harness: Harness, tmp_path: Path, timeout: float | None
) -> None:
    """Cancelling exec (SIGINT/SIGTERM in the CLI) cancels the step and kills its command first."""
    session = harness.sid("cancel")
    pidfile = tmp_path / "pid"
    command = Command(("sh", "-c", f'echo $$ > "{pidfile}"; exec sleep 300'), timeout=timeout)
    async with harness.worker():
        task = asyncio.create_task(harness.orchestrator.exec(session, command))

        async def started() -> bool:
            return pidfile.exists() and pidfile.read_text().strip().isdigit()

        await wait_until(started, 60, "the command to start")
        pid = int(pidfile.read_text())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Checked at once: the client returned only after the command was gone.
        assert not _alive(pid)
        again = await harness.orchestrator.exec(session, Command(("echo", "still serving")))
        assert again.stdout == b"still serving\n"
    description = await harness.client.get_workflow_handle(session_workflow_id(session)).describe()
    assert description.status is WorkflowExecutionStatus.RUNNING


async def test_an_unavailable_provider_is_reported_and_given_up(
    harness: Harness, tmp_path: Path
) -> None:
    """While the Docker Engine is unreachable the client says why, then gives up after its bound."""
    from mango_provider_docker import DockerProvider

    provider = DockerProvider(tmp_path / "docker", host="unix:///nonexistent/docker.sock")
    orchestrator = harness.orchestrator_with(default_provider="docker", policy=FAST_POLICY)
    session = harness.sid("down")
    heard: list[Waiting] = []
    try:
        async with harness.run_worker(provider, harness.store):
            with pytest.raises(ProviderUnavailable, match="gave up after 3 s") as caught:
                await orchestrator.exec(
                    session, Command(("true",)), max_wait=3.0, on_wait=heard.append
                )
            assert "connection to the Docker Engine at unix:///nonexistent" in str(caught.value)
            assert "--max-wait" in (caught.value.hint or "")
            assert heard, "nothing was reported while waiting"
            assert heard[0].activity == "acquire sandbox"
            assert "connection to the Docker Engine" in heard[0].reason
            assert heard[0].describe().startswith("waiting: acquire sandbox failed (attempt 1): ")
            handle = harness.client.get_workflow_handle(session_workflow_id(session))

            async def step_gone() -> bool:
                description = await handle.describe()
                return not description.raw_description.pending_activities

            await wait_until(step_gone, 30, "the abandoned step's cancellation")
            assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    finally:
        await provider.aclose()


async def test_a_step_whose_worker_just_stopped_says_so_and_gives_up(
    harness: Harness, tmp_path: Path
) -> None:
    """The stopped worker still counts as a recent poller: the client reports, then gives up.

    The abandoned step never runs later, when a worker is back.
    """
    session = harness.sid("orphaned")
    marker = tmp_path / "ran-late"
    async with harness.worker():
        await harness.orchestrator.exec(session, Command(("true",)))
    heard: list[Waiting] = []
    with pytest.raises(ProviderUnavailable, match="gave up after 5 s") as caught:
        await harness.orchestrator.exec(
            session, Command(("touch", str(marker))), max_wait=5.0, on_wait=heard.append
        )
    assert "no worker has picked up the step from task queue" in str(caught.value)
    assert "mango worker" in (caught.value.hint or "")
    assert heard, "nothing was reported while no worker picked the step up"
    assert heard[0].unclaimed
    assert heard[0].describe().startswith("waiting: no worker has picked up the step")
    # Reported within a few seconds of the step being sent, well before giving up.
    assert heard[0].give_up_in > 0
    async with harness.worker():
        after = await harness.orchestrator.exec(session, Command(("echo", "back")))
    assert after.stdout == b"back\n"
    assert not marker.exists(), "the abandoned step ran once a worker came back"


async def test_a_refused_spec_leaves_no_session_row_and_no_workflow(harness: Harness) -> None:
    """The client admits by the routed provider's registration before it writes anything."""
    registry = load_plugins(entry_points=False).providers()
    orchestrator = harness.orchestrator_with(capabilities=registry.capabilities)
    session = harness.sid("refused")
    spec = SandboxSpec(packages=PackagePlan(pip=["attrs"]))
    async with harness.worker():
        with pytest.raises(CapabilityNotSupported, match="local does not support package"):
            await orchestrator.exec(session, Command(("true",)), spec)
        with pytest.raises(CapabilityNotSupported):
            await orchestrator.run_tool(session, ToolCall("bash", {"command": "true"}), spec)
    assert await harness.store.get_session(session) is None
    with pytest.raises(RPCError):
        await harness.client.get_workflow_handle(session_workflow_id(session)).describe()


async def test_no_worker_leaves_no_session_row(harness: Harness) -> None:
    """A durable call that fails for want of a worker creates nothing."""
    session = harness.sid("nobody")
    with pytest.raises(ProviderUnavailable, match="no worker"):
        await harness.orchestrator.exec(session, Command(("true",)))
    assert await harness.store.get_session(session) is None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_a_result_over_the_payload_limit_is_cut_to_fit(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """Both streams at a 2 MiB cap would exceed Temporal's 2 MiB payload limit: cut, flagged."""
    provider = LocalProvider(tmp_path / "sandboxes", max_output_bytes=2 * 1024 * 1024)
    acts = MangoActivities(SessionManager(provider, store), store, heartbeat_interval=0.05)
    await store.ensure_session("big")
    command = Command(("sh", "-c", "head -c 3000000 /dev/urandom; head -c 3000000 /dev/zero >&2"))
    result = await ActivityEnvironment().run(
        acts.exec_command, ExecStepInput(session_id="big", command=command)
    )
    assert (result.stdout_truncated, result.stderr_truncated) == (True, True)
    encoded = sum(p.ByteSize() for p in await data_converter.encode([result]))
    assert encoded <= DEFAULT_BLOB_LIMIT
    assert len(result.stdout) + len(result.stderr) > DEFAULT_BLOB_LIMIT // 2  # cut, not emptied
    assert result.stderr == b"\0" * len(result.stderr)


async def test_another_command_under_the_same_activity_identity_runs_afresh(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """Only the command that made a step record collects it (a retry runs the same command).

    One ``ActivityEnvironment`` runs every activity under one workflow, run and
    activity id, so both steps below get one step identity: the second must run
    its own command, not be handed the first one's result.
    """
    provider = LocalProvider(tmp_path / "sandboxes")
    acts = MangoActivities(SessionManager(provider, store), store, heartbeat_interval=0.05)
    await store.ensure_session("two-commands")
    env = ActivityEnvironment()
    first = await env.run(
        acts.exec_command,
        ExecStepInput("two-commands", Command(("sh", "-c", "echo one >> log; cat log"))),
    )
    second = await env.run(
        acts.exec_command,
        ExecStepInput("two-commands", Command(("sh", "-c", "echo two >> log; cat log"))),
    )
    assert (first.stdout, second.stdout) == (b"one\n", b"one\ntwo\n")
