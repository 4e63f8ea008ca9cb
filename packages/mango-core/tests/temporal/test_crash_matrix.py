"""The crash matrix on every backend that runs here, counted: leaked, lost, duplicated.

``test_crash_recovery.py`` kills ``mango worker`` at each provisioning fault
point on the local provider. This module runs the same fault points (and the
orphaned-intent case) against the other backends, through a real worker
subprocess per run: a worker with ``MANGO_FAULT_POINT`` set SIGKILLs itself,
a clean worker finishes the step, the reconciler runs once more in-process,
and then the backend's resources are counted against the bindings in
PostgreSQL:

* **leaked**: a resource of the deployment (a container, a provider-owned host
  directory) that no binding names;
* **lost**: a Session whose binding is missing or marked lost, or whose step
  did not return its output;
* **duplicated**: more than one resource for one Session.

All three must be 0, and no provisioning intent may remain. Docker runs when
the daemon and the ``mango-test-busybox:latest`` image are there (a failure,
not a skip, with ``MANGO_REQUIRE_DOCKER=1``). A remote provider's fake joins by
adding a :class:`Backend` to :func:`backend`.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import pytest

from mango.app import SessionManager
from mango.domain import BindingStore, MangoError, Provider, SandboxSpec
from mango.provider.ownership import Ownership
from mango.temporal import Orchestrator, ToolCall, session_workflow_id
from mango.temporal.faults import FaultPoint

from .support import FAST_POLICY, Harness, WorkerProcess, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]

SIGKILLED = -signal.SIGKILL
DOCKER_IMAGE = "mango-test-busybox:latest"
STEP_BOUND = 120.0

PROVISIONING_POINTS = [
    FaultPoint.AFTER_INTENT,
    FaultPoint.AFTER_CREATE,
    FaultPoint.AFTER_SETUP,
    FaultPoint.AFTER_BINDING,
]


@attrs.frozen
class Backend:
    """One provider under test: how its workers are configured and how its resources are seen."""

    name: str
    worker_env: dict[str, str]
    """Variables of ``mango worker`` that select and configure the provider."""
    provider: Provider
    """The same provider, in this process, in the deployment's namespace."""
    ownership: Ownership
    """Names and labels of the provider in the deployment's namespace."""
    host_dirs: Callable[[], list[Path]]
    """The provider-owned host directories (live or half-removed)."""
    remove: Callable[[str], Awaitable[object]]
    """Remove one resource by external id, whatever state a failed run left it in."""


@attrs.frozen
class Counts:
    """What one run left behind."""

    leaked: list[str]
    lost: list[str]
    duplicated: list[str]
    intents: list[str]


async def count(backend: Backend, store: BindingStore, session_ids: list[str]) -> Counts:
    """Compare the backend's resources with the bindings of ``session_ids``."""
    bindings = {sid: await store.get_binding(sid) for sid in session_ids}
    bound = {b.ref for b in bindings.values() if b is not None and not b.lost}
    owned = await backend.provider.list_owned()
    per_session: dict[str, int] = {}
    for resource in owned:
        per_session[resource.session_hash] = per_session.get(resource.session_hash, 0) + 1
    bound_dirs = {backend.ownership.name(sid) for sid, b in bindings.items() if b is not None}
    leaked = [f"{r.ref}" for r in owned if r.ref not in bound]
    leaked += [str(d) for d in backend.host_dirs() if d.name not in bound_dirs]
    intents = [sid for sid in session_ids if await store.get_intent(sid) is not None]
    return Counts(
        leaked=leaked,
        lost=[sid for sid, b in bindings.items() if b is None or b.lost],
        duplicated=[h for h, n in per_session.items() if n > 1],
        intents=intents,
    )


async def _docker_ready() -> bool:
    from mango_provider_docker import Engine

    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        return await engine.image_exists(DOCKER_IMAGE)
    except MangoError:
        return False
    finally:
        await engine.aclose()


@pytest.fixture(params=["docker"])
async def backend(
    request: pytest.FixtureRequest, store: BindingStore, tmp_path: Path
) -> AsyncIterator[Backend]:
    """Each backend that runs here, in the test deployment's namespace; cleaned up after."""
    name: str = request.param
    namespace = await store.deployment_namespace()
    if name == "docker":
        if not await _docker_ready():
            if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
                pytest.fail("no Docker Engine with the test image (MANGO_REQUIRE_DOCKER=1)")
            pytest.skip("no Docker Engine with the test image")
        from mango_provider_docker import DockerProvider

        resource_dir = tmp_path / "docker"
        provider = DockerProvider(
            resource_dir,
            namespace=namespace,
            image=DOCKER_IMAGE,
            host=os.environ.get("DOCKER_HOST", "").strip() or None,
            pull_missing_images=False,
        )
        made = Backend(
            name=name,
            worker_env={
                # The worker takes the deployment's namespace from the store, as in production.
                "MANGO_SANDBOX": "docker",
                "MANGO_DISABLE_PLUGINS": "",
                "MANGO_SANDBOX_IMAGE": DOCKER_IMAGE,
                "MANGO_SANDBOX_PULL": "0",
                "MANGO_SANDBOX_RESOURCE_DIR": str(resource_dir),
            },
            provider=provider,
            ownership=provider.ownership,
            host_dirs=lambda: (
                sorted(p for p in resource_dir.iterdir() if p.name.startswith("mango-"))
                if resource_dir.exists()
                else []
            ),
            remove=provider.engine.remove_container,
        )
    else:  # pragma: no cover - a backend listed above without a branch here
        pytest.fail(f"no set-up for backend {name!r}")
    try:
        yield made
    finally:
        try:
            # Whatever a failing run left behind goes, so the daemon does not fill up.
            for resource in await made.provider.list_owned():
                await made.remove(resource.ref.external_id)
        finally:
            await made.provider.aclose()


def echo(text: str) -> ToolCall:
    """A bash step printing ``text``."""
    return ToolCall("bash", {"command": f"echo {text}"})


def orchestrator_for(harness: Harness, backend: Backend) -> Orchestrator:
    """The client side, routing new Sessions to ``backend``."""
    return Orchestrator(
        harness.client,
        harness.store,
        backend.name,
        task_queue_prefix=harness.queue_prefix,
        policy=FAST_POLICY,
    )


async def reconcile_and_count(harness: Harness, backend: Backend, session_id: str) -> Counts:
    """One more reconcile pass in this process, then the counts."""
    report = await SessionManager(backend.provider, harness.store).reconcile_provisioning()
    assert report.failures == (), report
    return await count(backend, harness.store, [session_id])


async def assert_clean(harness: Harness, backend: Backend, session_id: str) -> None:
    """Leaked, lost, duplicated: all 0; no intent; exactly one resource, the bound one."""
    counts = await reconcile_and_count(harness, backend, session_id)
    assert counts == Counts(leaked=[], lost=[], duplicated=[], intents=[])
    binding = await harness.store.get_binding(session_id)
    assert binding is not None
    assert [r.ref for r in await backend.provider.list_owned()] == [binding.ref]


async def assert_nothing_left(harness: Harness, backend: Backend, session_id: str) -> None:
    """After deletion: no row, and no resource or host directory of the deployment."""
    assert await harness.store.get_session(session_id) is None
    assert await backend.provider.list_owned() == []
    assert backend.host_dirs() == []


@pytest.mark.parametrize("point", PROVISIONING_POINTS, ids=str)
async def test_crash_while_provisioning(
    harness: Harness,
    backend: Backend,
    spawn_worker: Callable[..., WorkerProcess],
    point: FaultPoint,
) -> None:
    """Killed at ``point``, the step completes on the next worker: 0 leaked, lost, duplicated."""
    session_id = harness.sid(f"matrix-{backend.name}-{point}")
    orchestrator = orchestrator_for(harness, backend)
    faulty = spawn_worker(point.value, **backend.worker_env)
    await faulty.wait_ready()
    step = asyncio.ensure_future(orchestrator.run_tool(session_id, echo("survived")))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    assert f"killing pid {faulty.process.pid} at {point}" in faulty.text()
    assert not step.done()

    clean = spawn_worker(**backend.worker_env)
    await clean.wait_ready()
    result = await asyncio.wait_for(step, STEP_BOUND)
    assert result.output == "survived\n"
    await assert_clean(harness, backend, session_id)

    assert await asyncio.wait_for(orchestrator.delete_session(session_id), STEP_BOUND)
    await assert_nothing_left(harness, backend, session_id)


async def test_orphaned_intent_is_reconciled_after_a_crash(
    harness: Harness, backend: Backend, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """No step waits for it: the restarted worker's reconciler binds the created resource."""
    session_id = harness.sid(f"matrix-{backend.name}-orphan")
    orchestrator = orchestrator_for(harness, backend)
    faulty = spawn_worker(FaultPoint.AFTER_CREATE.value, "--no-reconciler", **backend.worker_env)
    await faulty.wait_ready()
    step = asyncio.ensure_future(orchestrator.run_tool(session_id, echo("x")))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    await harness.client.get_workflow_handle(session_workflow_id(session_id)).terminate("test")
    with pytest.raises(MangoError):
        await asyncio.wait_for(step, 30)
    assert await harness.store.get_intent(session_id) is not None
    assert len(await backend.provider.list_owned()) == 1

    clean = spawn_worker(**backend.worker_env)
    await clean.wait_ready()

    async def reconciled() -> bool:
        return await harness.store.get_intent(session_id) is None

    await wait_until(reconciled, 60, "the reconciler to finish the intent")
    await assert_clean(harness, backend, session_id)
    assert await asyncio.wait_for(orchestrator.delete_session(session_id), STEP_BOUND)
    await assert_nothing_left(harness, backend, session_id)


async def test_the_count_sees_a_leak(harness: Harness, backend: Backend) -> None:
    """The counter is not vacuous: a resource with no binding is leaked, its Session lost."""
    session_id = harness.sid(f"matrix-{backend.name}-count")
    await harness.store.ensure_session(session_id)
    sandbox = await backend.provider.create(session_id, SandboxSpec())
    counts = await count(backend, harness.store, [session_id])
    assert counts.leaked == [str(sandbox.ref), *(str(d) for d in backend.host_dirs())]
    assert len(counts.leaked) == 2
    assert counts.lost == [session_id]
    await backend.provider.destroy(session_id, sandbox.ref)
    assert await count(backend, harness.store, []) == Counts([], [], [], [])
