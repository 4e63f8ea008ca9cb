"""The crash matrix on every backend that runs here, counted: leaked, lost, duplicated.

``test_crash_recovery.py`` kills ``mango worker`` at each provisioning and
deletion fault point on the local provider. This module runs the same fault
points (and the orphaned-intent cases) against the other backends, through a
real worker subprocess per run: a worker with ``MANGO_FAULT_POINT`` set
SIGKILLs itself, a clean worker finishes the step, the reconciler runs once
more in-process, and then the backend's resources are counted against the
bindings in PostgreSQL:

* **leaked**: a resource of the deployment (a container, a provider-owned host
  directory, a live sandbox in a vendor fake) that no binding names;
* **lost**: a Session whose binding is missing or marked lost, or whose step
  did not return its output;
* **duplicated**: more than one resource for one Session.

All three must be 0, and no provisioning intent may remain. After a deletion,
nothing of the Session may be left anywhere.

The backends: Docker (when the daemon and the ``mango-test-busybox:latest``
image are there; a failure, not a skip, with ``MANGO_REQUIRE_DOCKER=1``) and
the fake of each remote provider (E2B, CubeSandbox, OpenSandbox, Daytona). A
fake runs in this process on a thread of its own (:mod:`.served`): it is the
vendor's service, so it survives every worker, and its own sandbox list is
counted too, not only what the provider lists. The workers reach it through
the provider's documented settings, exactly as a deployment would be pointed
at it. The two deletion points inside a host-directory removal
(``after-rename``, ``after-removal``) exist only where a provider owns host
directories (Docker); the remote providers have none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import SessionManager
from mango.domain import BindingStore, MangoError, Provider, SandboxSpec
from mango.fakes import FakeService
from mango.provider import ProviderContext
from mango.provider.ownership import Ownership
from mango.temporal import Orchestrator, ToolCall, session_workflow_id
from mango.temporal.faults import FaultPoint

from .served import ServedFake
from .support import FAST_POLICY, Harness, WorkerProcess, wait_until

# One lane per fault point, each with its own `mango worker` subprocesses: a test
# starts eight or more interpreters at once. Under pytest-xdist these tests share
# one worker, so two of them never start their fleets on the same CPUs together
# (four at once kept workers from becoming ready within their bound).
pytestmark = [
    pytest.mark.temporal,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.xdist_group("crash-matrix"),
]

SIGKILLED = -signal.SIGKILL
DOCKER_IMAGE = "mango-test-busybox:latest"
STEP_BOUND = 120.0

PROVISIONING_POINTS = [
    FaultPoint.AFTER_INTENT,
    FaultPoint.AFTER_CREATE,
    FaultPoint.AFTER_SETUP,
    FaultPoint.AFTER_BINDING,
]
HOST_DIR_POINTS = [FaultPoint.AFTER_RENAME, FaultPoint.AFTER_REMOVAL]
"""Deletion points inside a host-directory removal: reached only where a provider owns one."""
DELETION_POINTS = [
    FaultPoint.AFTER_FENCE,
    *HOST_DIR_POINTS,
    FaultPoint.DURING_DESTROY,
    FaultPoint.AFTER_BINDING_REMOVED,
]
"""The points of a bound Session's deletion, in order."""

REMOTE_BACKENDS = ["e2b", "cube", "opensandbox", "daytona"]
BACKENDS = ["docker", *REMOTE_BACKENDS]


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
    host_dirs: Callable[[], list[Path]] = list
    """The provider-owned host directories (live or half-removed)."""
    remove: Callable[[str], Awaitable[object]] | None = None
    """Remove one resource by external id, whatever state a failed run left it in (a fake
    needs none: stopping it deletes every sandbox)."""
    vendor_sandboxes: Callable[[], Awaitable[list[str]]] | None = None
    """A fake's own list of its live sandboxes (ids), whatever labels they carry."""
    host_dirs_owned: bool = False
    """Whether the provider owns host directories (and so reaches ``HOST_DIR_POINTS``)."""
    secrets: dict[str, str] = attrs.field(factory=dict)
    """Secret settings of the workers (name: value): no worker may ever print a value."""


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
    if backend.vendor_sandboxes is not None:
        bound_ids = {ref.external_id for ref in bound}
        leaked += [
            f"vendor:{sandbox_id}"
            for sandbox_id in await backend.vendor_sandboxes()
            if sandbox_id not in bound_ids
        ]
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


async def _docker_backend(namespace: str, resource_dir: Path) -> Backend:
    if not await _docker_ready():
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail("no Docker Engine with the test image (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip("no Docker Engine with the test image")
    from mango_provider_docker import DockerProvider

    provider = DockerProvider(
        resource_dir,
        namespace=namespace,
        image=DOCKER_IMAGE,
        host=os.environ.get("DOCKER_HOST", "").strip() or None,
        pull_missing_images=False,
    )
    return Backend(
        name="docker",
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
        host_dirs_owned=True,
    )


@attrs.frozen
class RemoteSetup:
    """How one remote provider's fake is served and how a deployment is pointed at it."""

    open_fake: Callable[[Path], contextlib.AbstractAsyncContextManager[Any]]
    service: Callable[[Any], FakeService]
    """The kit service inside what ``open_fake`` yields (its sandbox registry)."""
    settings: Callable[[Any], dict[str, str]]
    """The provider's documented settings pointing at the running fake."""
    factory: Callable[[ProviderContext], Provider]
    """The registration's factory, given those settings through the context."""


def _remote_setup(name: str) -> RemoteSetup:
    """The set-up of remote backend ``name`` (its distribution is imported only here)."""
    if name in ("e2b", "cube"):
        from mango_provider_cube.settings import open_cube_provider
        from mango_provider_e2b.fake import (
            CUBE_MODE,
            E2BFakeService,
            FakeConfig,
            mango_settings,
        )
        from mango_provider_e2b.settings import open_e2b_provider

        config = (
            FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local")
            if name == "cube"
            else FakeConfig()
        )
        return RemoteSetup(
            open_fake=lambda scratch: E2BFakeService.create(scratch, config),
            service=lambda fake: fake,
            settings=lambda fake: mango_settings(fake.url, config),
            factory=open_cube_provider if name == "cube" else open_e2b_provider,
        )
    if name == "opensandbox":
        from mango_provider_opensandbox.fake import FakeOpenSandbox
        from mango_provider_opensandbox.settings import open_opensandbox_provider

        return RemoteSetup(
            # The real execd keeps a finished command's stream open for 1 s; 0.2 s here.
            open_fake=lambda scratch: FakeOpenSandbox(scratch, grace_seconds=0.2),
            service=lambda fake: fake.service,
            settings=lambda fake: {
                "OPEN_SANDBOX_DOMAIN": fake.url,
                "OPEN_SANDBOX_API_KEY": str(fake.api_key),
            },
            factory=open_opensandbox_provider,
        )
    if name == "daytona":
        from mango_provider_daytona.fake import FAKE_API_KEY, open_fake_daytona
        from mango_provider_daytona.settings import open_daytona_provider

        return RemoteSetup(
            open_fake=open_fake_daytona,
            service=lambda served: served[0],
            settings=lambda served: {
                "DAYTONA_API_URL": served[0].url,
                "DAYTONA_API_KEY": FAKE_API_KEY,
            },
            factory=open_daytona_provider,
        )
    pytest.fail(f"no set-up for backend {name!r}")  # pragma: no cover - a name without a branch


def _remote_backend(
    name: str, setup: RemoteSetup, namespace: str, served: ServedFake[Any], fake: Any
) -> Backend:
    settings = setup.settings(fake)
    service = setup.service(fake)

    async def live_ids() -> list[str]:
        return [record.id for record in service.sandboxes.list()]

    provider = setup.factory(ProviderContext(namespace, environ=settings))
    return Backend(
        name=name,
        worker_env={"MANGO_SANDBOX": name, "MANGO_DISABLE_PLUGINS": "", **settings},
        provider=provider,
        ownership=Ownership(name, namespace),
        vendor_sandboxes=lambda: served.call(live_ids),
        secrets={key: value for key, value in settings.items() if key.endswith("_API_KEY")},
    )


@pytest.fixture(params=BACKENDS)
async def backend(
    request: pytest.FixtureRequest, store: BindingStore, tmp_path: Path
) -> AsyncIterator[Backend]:
    """Each backend that runs here, in the test deployment's namespace; cleaned up after."""
    name: str = request.param
    namespace = await store.deployment_namespace()
    with contextlib.ExitStack() as stack:
        if name == "docker":
            made = await _docker_backend(namespace, tmp_path / "docker")
        else:
            setup = _remote_setup(name)
            scratch = tmp_path / f"{name}-fake"
            served: ServedFake[Any] = ServedFake(lambda: setup.open_fake(scratch))
            fake = stack.enter_context(served)  # stopped last: it deletes every sandbox
            made = _remote_backend(name, setup, namespace, served, fake)
        try:
            yield made
        finally:
            try:
                if made.remove is not None:
                    # Whatever a failing run left behind goes, so the daemon does not fill up.
                    for resource in await made.provider.list_owned():
                        await made.remove(resource.ref.external_id)
            finally:
                await made.provider.aclose()


@pytest.fixture
def spawn_worker(
    spawn_worker: Callable[..., WorkerProcess], backend: Backend
) -> Iterator[Callable[..., WorkerProcess]]:
    """The harness's worker factory; afterwards, no worker printed a secret setting's value."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, **env: str) -> WorkerProcess:
        worker = spawn_worker(*args, **env)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        text = worker.text()
        shown = sorted(name for name, value in backend.secrets.items() if value in text)
        assert not shown, f"a worker printed the value of {shown}:\n{text}"


def echo(text: str) -> ToolCall:
    """A bash step printing ``text``."""
    return ToolCall("bash", {"command": f"echo {text}"})


def orchestrator_for(harness: Harness, backend: Backend, prefix: str | None = None) -> Orchestrator:
    """The client side, routing new Sessions to ``backend`` (on ``prefix``'s task queues)."""
    return Orchestrator(
        harness.client,
        harness.store,
        backend.name,
        task_queue_prefix=prefix or harness.queue_prefix,
        policy=FAST_POLICY,
    )


async def reconcile_and_count(harness: Harness, backend: Backend, session_ids: list[str]) -> Counts:
    """One more reconcile pass in this process, then the counts."""
    report = await SessionManager(backend.provider, harness.store).reconcile_provisioning()
    assert report.failures == (), report
    return await count(backend, harness.store, session_ids)


async def assert_clean(harness: Harness, backend: Backend, *session_ids: str) -> None:
    """Leaked, lost, duplicated: all 0; no intent; exactly the bound resources, one each."""
    counts = await reconcile_and_count(harness, backend, list(session_ids))
    assert counts == Counts(leaked=[], lost=[], duplicated=[], intents=[])
    bound = [await harness.store.get_binding(session_id) for session_id in session_ids]
    assert None not in bound
    refs = sorted(str(r.ref) for r in await backend.provider.list_owned())
    assert refs == sorted(str(b.ref) for b in bound if b is not None)


async def assert_nothing_left(harness: Harness, backend: Backend, *session_ids: str) -> None:
    """After deletion: no row, binding or intent; nothing of the deployment left anywhere."""
    store = harness.store
    for session_id in session_ids:
        rows = (
            await store.get_session(session_id),
            await store.get_binding(session_id),
            await store.get_intent(session_id),
        )
        assert rows == (None, None, None), session_id
    assert await count(backend, store, []) == Counts(leaked=[], lost=[], duplicated=[], intents=[])
    assert await backend.provider.list_owned() == []
    assert backend.host_dirs() == []


@attrs.frozen
class Lane:
    """One fault point's run: its own Session, task queues and workers, beside the others.

    The points of one test run at the same time, each on task queues of its
    own, so a worker crashing at one point only ever serves its own
    Session's steps. The crashing workers run without a reconciler (it
    would also finish the other lanes' Sessions and crash there); the clean
    workers that take over run theirs, so the reconcilers race the retried
    steps as they do in a deployment.
    """

    point: FaultPoint
    session_id: str
    prefix: str
    orchestrator: Orchestrator

    def worker(
        self, spawn: Callable[..., WorkerProcess], backend: Backend, *, faulty: bool
    ) -> WorkerProcess:
        """A worker on this lane's queues: crashing at the lane's point, or a clean one."""
        env = {**backend.worker_env, "MANGO_TEMPORAL_TASK_QUEUE_PREFIX": self.prefix}
        if faulty:
            return spawn(self.point.value, "--no-reconciler", **env)
        return spawn(**env)


def lanes_for(harness: Harness, backend: Backend, points: list[FaultPoint]) -> list[Lane]:
    """One lane per point of ``points``."""
    lanes = []
    for point in points:
        prefix = f"{harness.queue_prefix}-{point}"
        lanes.append(
            Lane(
                point=point,
                session_id=harness.sid(f"matrix-{backend.name}-{point}"),
                prefix=prefix,
                orchestrator=orchestrator_for(harness, backend, prefix),
            )
        )
    return lanes


async def all_ready(workers: list[WorkerProcess]) -> None:
    """Wait until every worker of ``workers`` polls."""
    await asyncio.gather(*(worker.wait_ready() for worker in workers))


async def assert_crashed(lanes: list[Lane], workers: list[WorkerProcess]) -> None:
    """Every lane's worker killed itself with SIGKILL at the lane's point."""
    codes = await asyncio.gather(*(worker.wait_exit() for worker in workers))
    for lane, worker, code in zip(lanes, workers, codes, strict=True):
        assert code == SIGKILLED, worker.text()
        assert f"killing pid {worker.process.pid} at {lane.point}" in worker.text()


async def test_crash_while_provisioning(
    harness: Harness, backend: Backend, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """Killed at each provisioning point, the step completes on the next worker.

    Afterwards leaked, lost and duplicated are 0, and deleting every Session leaves nothing.
    """
    lanes = lanes_for(harness, backend, PROVISIONING_POINTS)
    faulty = [lane.worker(spawn_worker, backend, faulty=True) for lane in lanes]
    await all_ready(faulty)
    steps = [
        asyncio.ensure_future(lane.orchestrator.run_tool(lane.session_id, echo(lane.point)))
        for lane in lanes
    ]
    await assert_crashed(lanes, faulty)
    assert not any(step.done() for step in steps)

    await all_ready([lane.worker(spawn_worker, backend, faulty=False) for lane in lanes])
    results = await asyncio.wait_for(asyncio.gather(*steps), STEP_BOUND)
    assert [result.output for result in results] == [f"{lane.point}\n" for lane in lanes]
    session_ids = [lane.session_id for lane in lanes]
    await assert_clean(harness, backend, *session_ids)

    deleted = [lane.orchestrator.delete_session(lane.session_id) for lane in lanes]
    assert await asyncio.wait_for(asyncio.gather(*deleted), STEP_BOUND) == [True] * len(lanes)
    await assert_nothing_left(harness, backend, *session_ids)


async def test_crash_while_deleting(
    harness: Harness, backend: Backend, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """Killed at each point of a deletion, the next worker finishes it: nothing of it is left."""
    points = [p for p in DELETION_POINTS if backend.host_dirs_owned or p not in HOST_DIR_POINTS]
    lanes = lanes_for(harness, backend, points)
    faulty = [lane.worker(spawn_worker, backend, faulty=True) for lane in lanes]
    await all_ready(faulty)
    bound = [lane.orchestrator.run_tool(lane.session_id, echo("bound")) for lane in lanes]
    results = await asyncio.wait_for(asyncio.gather(*bound), STEP_BOUND)
    assert [result.output for result in results] == ["bound\n"] * len(lanes)
    session_ids = [lane.session_id for lane in lanes]
    await assert_clean(harness, backend, *session_ids)

    deletions = [
        asyncio.ensure_future(lane.orchestrator.delete_session(lane.session_id)) for lane in lanes
    ]
    await assert_crashed(lanes, faulty)
    assert not any(deletion.done() for deletion in deletions)
    for lane in lanes:
        if lane.point is FaultPoint.DURING_DESTROY:
            assert await backend.provider.find(lane.session_id) is None  # destroyed...
            assert await harness.store.get_binding(lane.session_id) is not None  # ...still bound

    await all_ready([lane.worker(spawn_worker, backend, faulty=False) for lane in lanes])
    assert await asyncio.wait_for(asyncio.gather(*deletions), STEP_BOUND) == [True] * len(lanes)
    await assert_nothing_left(harness, backend, *session_ids)


async def orphan_intent(
    harness: Harness,
    backend: Backend,
    spawn_worker: Callable[..., WorkerProcess],
    orchestrator: Orchestrator,
    session_id: str,
) -> None:
    """Crash a worker right after create and give up on the step: only the intent remains."""
    faulty = spawn_worker(FaultPoint.AFTER_CREATE.value, "--no-reconciler", **backend.worker_env)
    await faulty.wait_ready()
    step = asyncio.ensure_future(orchestrator.run_tool(session_id, echo("x")))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    # An operator gives up on the Session's workflow; only the intent remains.
    await harness.client.get_workflow_handle(session_workflow_id(session_id)).terminate("test")
    with pytest.raises(MangoError):
        await asyncio.wait_for(step, 30)
    assert await harness.store.get_intent(session_id) is not None
    assert await harness.store.get_binding(session_id) is None
    assert len(await backend.provider.list_owned()) == 1


async def test_orphaned_intent_is_reconciled_after_a_crash(
    harness: Harness, backend: Backend, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """No step waits for it: the restarted worker's reconciler binds the created resource."""
    session_id = harness.sid(f"matrix-{backend.name}-orphan")
    orchestrator = orchestrator_for(harness, backend)
    await orphan_intent(harness, backend, spawn_worker, orchestrator, session_id)

    clean = spawn_worker(**backend.worker_env)
    await clean.wait_ready()

    async def reconciled() -> bool:
        return await harness.store.get_intent(session_id) is None

    await wait_until(reconciled, 60, "the reconciler to finish the intent")
    await assert_clean(harness, backend, session_id)
    assert await asyncio.wait_for(orchestrator.delete_session(session_id), STEP_BOUND)
    await assert_nothing_left(harness, backend, session_id)


async def test_crash_while_deleting_an_orphaned_intent(
    harness: Harness, backend: Backend, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """An intent-only Session's deletion, killed once its intent is gone, releases the resource.

    Nothing is bound, so the deletion finds the resource by the provider's own
    records; the crash comes after the intent row was removed, when only the
    Session row still says a deletion is under way.
    """
    session_id = harness.sid(f"matrix-{backend.name}-orphan-delete")
    orchestrator = orchestrator_for(harness, backend)
    await orphan_intent(harness, backend, spawn_worker, orchestrator, session_id)

    point = FaultPoint.AFTER_INTENT_REMOVED
    faulty = spawn_worker(point.value, "--no-reconciler", **backend.worker_env)
    await faulty.wait_ready()
    deletion = asyncio.ensure_future(orchestrator.delete_session(session_id))
    assert await faulty.wait_exit() == SIGKILLED, faulty.text()
    assert f"killing pid {faulty.process.pid} at {point}" in faulty.text()
    assert await backend.provider.list_owned() == []  # released before the intent went

    clean = spawn_worker(**backend.worker_env)
    await clean.wait_ready()
    assert await asyncio.wait_for(deletion, STEP_BOUND) is True
    await assert_nothing_left(harness, backend, session_id)


async def test_the_count_sees_a_leak(harness: Harness, backend: Backend) -> None:
    """The counter is not vacuous: a resource with no binding is leaked, its Session lost.

    Each backend has a second witness of the same resource (Docker's host
    directory, a fake's own sandbox list), so a leak is counted twice.
    """
    session_id = harness.sid(f"matrix-{backend.name}-count")
    await harness.store.ensure_session(session_id)
    sandbox = await backend.provider.create(session_id, SandboxSpec())
    counts = await count(backend, harness.store, [session_id])
    vendor = [] if backend.vendor_sandboxes is None else await backend.vendor_sandboxes()
    assert counts.leaked == [
        str(sandbox.ref),
        *(str(d) for d in backend.host_dirs()),
        *(f"vendor:{sandbox_id}" for sandbox_id in vendor),
    ]
    assert len(counts.leaked) == 2
    assert counts.lost == [session_id]
    await backend.provider.destroy(session_id, sandbox.ref)
    assert await count(backend, harness.store, []) == Counts([], [], [], [])


# ------------------------------------------------------------------ File Resources and outputs

RESOURCE_BYTES = b"a File Resource, copied before every step\n" * 4096
RESOURCE_PATH = "/mnt/session/uploads/in/data.txt"
STEP = (
    f"wc -c < {RESOURCE_PATH}; ls -A /mnt/session/uploads/in; echo out > /mnt/session/outputs/o.txt"
)


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 65536):
        yield data[start : start + 65536]


async def _file_rows(store: BindingStore) -> list[tuple[str, str | None]]:
    async with store.pool.connection() as conn:  # type: ignore[attr-defined]
        cursor = await conn.execute("SELECT state, output_path FROM mango_files ORDER BY id")
        return sorted(await cursor.fetchall(), key=str)


@pytest.mark.parametrize("backend", ["docker"], indirect=True)
async def test_crash_while_importing_or_publishing(
    harness: Harness,
    backend: Backend,
    spawn_worker: Callable[..., WorkerProcess],
    worker_env: Any,
) -> None:
    """Killed mid-import (temporary file, before the marker) or between an output's upload
    and its completion: after a clean worker and a reconcile pass, no half-written file
    in the sandbox or the store, no orphan blob, no duplicate output row."""
    from mango.app.files import StoredFiles
    from mango.app.session_files import SessionFiles
    from mango.filestore import FilesystemFileStore
    from mango.postgres import PostgresFileCatalog, PostgresOutputCatalog, PostgresResourceCatalog
    from mango.temporal.faults import RESOURCE_POINTS

    store = harness.store
    blobs = FilesystemFileStore(worker_env.state_dir / "files")
    stored = StoredFiles(
        PostgresFileCatalog(store.pool),  # type: ignore[attr-defined]
        blobs,
        await store.deployment_namespace(),
    )
    files = SessionFiles(
        PostgresResourceCatalog(store.pool),  # type: ignore[attr-defined]
        PostgresOutputCatalog(store.pool),  # type: ignore[attr-defined]
        stored,
    )
    source = await stored.put(_chunks(RESOURCE_BYTES), filename="data.txt")
    lanes = [
        attrs.evolve(lane, orchestrator=attrs.evolve(lane.orchestrator, outputs_quiet_period=0.5))
        for lane in lanes_for(harness, backend, list(RESOURCE_POINTS))
    ]
    for lane in lanes:
        await store.ensure_session(lane.session_id)
        await files.add_resource(lane.session_id, source.file_id, "in/data.txt")
    faulty = [lane.worker(spawn_worker, backend, faulty=True) for lane in lanes]
    await all_ready(faulty)
    call = ToolCall("bash", {"command": STEP})
    steps = [
        asyncio.ensure_future(lane.orchestrator.run_tool(lane.session_id, call)) for lane in lanes
    ]
    await assert_crashed(lanes, faulty)

    await all_ready([lane.worker(spawn_worker, backend, faulty=False) for lane in lanes])
    results = await asyncio.wait_for(asyncio.gather(*steps), STEP_BOUND)
    assert [r.output for r in results] == [f"{len(RESOURCE_BYTES)}\ndata.txt\n"] * len(lanes)

    async def published() -> bool:
        return all([await files.list_outputs(lane.session_id) for lane in lanes])

    await wait_until(published, STEP_BOUND, "every Session's outputs to be published")
    report = await stored.reconcile(stale_after=timedelta(0))
    assert report.failures == ()
    for lane in lanes:
        outputs = await files.list_outputs(lane.session_id)
        assert [(o.output_path, o.size) for o in outputs] == [("o.txt", 4)], lane.point
    rows = await _file_rows(store)
    assert rows == sorted([("ready", None)] + [("ready", "o.txt")] * len(lanes), key=str)
    named = {
        row.blob_key
        for row in [
            source,
            *[o for lane in lanes for o in await files.list_outputs(lane.session_id)],
        ]
    }
    assert {entry.key async for entry in blobs.scan("")} == named
    await assert_clean(harness, backend, *[lane.session_id for lane in lanes])

    deleted = [lane.orchestrator.delete_session(lane.session_id) for lane in lanes]
    assert await asyncio.wait_for(asyncio.gather(*deleted), STEP_BOUND) == [True] * len(lanes)
    await assert_nothing_left(harness, backend, *[lane.session_id for lane in lanes])
    assert {entry.key async for entry in blobs.scan("")} == {source.blob_key}
    await blobs.aclose()
