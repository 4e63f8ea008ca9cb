"""A step's command runs once, even when ``mango worker`` is SIGKILLed while it runs.

Each test runs a command that appends ``start``, waits for a release file,
appends ``token`` and ``end`` to ``marks`` in the workspace, and prints
``done``. The worker running the step is SIGKILLed once ``start`` is there;
a second worker takes the step over (Temporal retries the activity). The
release comes either while the retried attempt runs (the retry must find the
dead worker's command still running, wait for it and collect its result)
or before the second worker starts (the retry finds it ended and collects).
Counted afterwards, on local, Docker and the E2B fake: the token once (no duplicated side
effect) and ``start, token, end`` in that order (no overlapping run), and
the step's result is the command's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.domain import Command, Provider, SandboxSpec
from mango.local import LocalProvider
from mango.temporal import Orchestrator, ToolCall, session_workflow_id

from .served import ServedFake
from .support import FAST_POLICY, Harness, WorkerProcess, wait_until
from .test_crash_matrix import _docker_backend, _remote_backend, _remote_setup

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]

SCRIPT = (
    "echo start >> marks; while [ ! -f release ]; do sleep 0.05; done; "
    "echo token >> marks; echo end >> marks; echo done"
)
STEP_BOUND = 120.0


@attrs.frozen
class Target:
    """One backend: its workers' settings and a direct client of its sandboxes."""

    name: str
    worker_env: dict[str, str]
    provider: Provider


@pytest.fixture
async def target(
    request: pytest.FixtureRequest, harness: Harness, tmp_path: Path
) -> AsyncIterator[Target]:
    """The local provider (the harness's workers), Docker or the E2B fake (served in this
    process, as the vendor's service), in the deployment's namespace."""
    namespace = await harness.store.deployment_namespace()
    if request.param == "local":
        local = LocalProvider(harness.sandbox_dir, namespace=namespace)
        yield Target("local", {}, local)
        return
    if request.param != "docker":
        name: str = request.param
        setup = _remote_setup(name)
        served: ServedFake[Any] = ServedFake(lambda: setup.open_fake(tmp_path / f"{name}-fake"))
        with served as fake:  # stopped last: it deletes every sandbox
            remote = _remote_backend(name, setup, namespace, served, fake)
            try:
                yield Target(name, remote.worker_env, remote.provider)
            finally:
                await remote.provider.aclose()
        return
    backend = await _docker_backend(namespace, tmp_path / "docker")
    try:
        yield Target("docker", backend.worker_env, backend.provider)
    finally:
        try:
            if backend.remove is not None:  # whatever a failing run left behind goes
                for resource in await backend.provider.list_owned():
                    await backend.remove(resource.ref.external_id)
        finally:
            await backend.provider.aclose()


def side_effects(marks: list[bytes]) -> tuple[int, int]:
    """How many runs were duplicated (tokens past the first) and overlapping (a start while
    another run had not ended)."""
    overlapping = running = 0
    for mark in marks:
        if mark == b"start":
            overlapping += running > 0
            running += 1
        elif mark == b"end":
            running -= 1
    return max(marks.count(b"token") - 1, 0), overlapping


async def direct(harness: Harness, target: Target, session_id: str, *argv: str) -> bytes:
    """Run ``argv`` in the Session's sandbox directly (not through the workflow)."""
    binding = await harness.store.get_binding(session_id)
    assert binding is not None
    sandbox = await target.provider.attach(session_id, binding.ref, SandboxSpec())
    result = await sandbox.exec(Command(argv))
    return result.stdout


async def retried(harness: Harness, session_id: str) -> bool:
    """Whether the Session's running activity is on its second attempt or later."""
    handle = harness.client.get_workflow_handle(session_workflow_id(session_id))
    description = await handle.describe()
    return any(a.attempt >= 2 for a in description.raw_description.pending_activities)


CASES = [
    *(
        pytest.param(backend, kind, release, id=f"{backend}-{kind}-{release}")
        for backend in ("local", "docker", "e2b")
        for kind in ("exec", "tool")
        for release in ("while-retried", "before-retry")
    ),
    # A local activity's retry is the replay of its workflow task (no attempt shows), and
    # its path is the same on every provider.
    pytest.param("local", "local-activity", "before-retry", id="local-local-activity"),
]


@pytest.mark.parametrize(("target", "step_kind", "release"), CASES, indirect=["target"])
async def test_a_killed_workers_command_runs_once(
    harness: Harness,
    target: Target,
    spawn_worker: Callable[..., WorkerProcess],
    step_kind: str,
    release: str,
) -> None:
    """No duplicated and no overlapping run; the command's own result."""
    session_id = harness.sid(f"once-{target.name}-{step_kind}-{release}")
    orchestrator = Orchestrator(
        harness.client,
        harness.store,
        target.name,
        task_queue_prefix=harness.queue_prefix,
        policy=FAST_POLICY,
    )
    first = spawn_worker(**target.worker_env)
    await first.wait_ready()
    assert (await orchestrator.exec(session_id, Command(("true",)))).exit_code == 0

    if step_kind == "tool":
        step = asyncio.ensure_future(
            orchestrator.run_tool(session_id, ToolCall("bash", {"command": SCRIPT}))
        )
    else:
        timeout = 10.0 if step_kind == "local-activity" else None
        step = asyncio.ensure_future(
            orchestrator.exec(session_id, Command(("sh", "-c", SCRIPT), timeout=timeout))
        )

    async def started() -> bool:
        return b"start" in await direct(harness, target, session_id, "cat", "marks")

    await wait_until(started, 60, "the command to start")
    first.process.kill()
    await first.wait_exit()
    if release == "before-retry":
        await direct(harness, target, session_id, "touch", "release")
    second = spawn_worker(**target.worker_env)
    await second.wait_ready()
    if release == "while-retried":
        await wait_until(lambda: retried(harness, session_id), 60, "the retried attempt")
        await direct(harness, target, session_id, "touch", "release")

    result = await asyncio.wait_for(step, STEP_BOUND)
    if step_kind == "tool":
        assert result.output == "done\n"
    else:
        assert (result.stdout, result.exit_code, result.timed_out) == (b"done\n", 0, False)
    marks = (await direct(harness, target, session_id, "cat", "marks")).splitlines()
    assert side_effects(marks) == (0, 0), marks
    assert marks == [b"start", b"token", b"end"]
    assert await asyncio.wait_for(orchestrator.delete_session(session_id), STEP_BOUND)
