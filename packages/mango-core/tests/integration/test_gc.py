"""``mango gc`` on every backend that runs here, with the claims of real PostgreSQL.

Each backend (local, Docker, and the E2B, Cube, OpenSandbox and Daytona
fakes over real HTTP) gets the same scenario: a bound Session, a hand-made
orphan, another deployment's sandbox; the sweep reports, then removes only
the orphan. A provisioning caught between create and binding is never
swept; on the fakes, a listing that spans several pages is swept whole and
a provider that fails mid-sweep removes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import SessionManager
from mango.app.sweep import Outcome, Verdict, sweep_orphans
from mango.domain import Command, SandboxSpec
from mango.domain.ports import Provider
from mango.domain.values import OwnedResource, SandboxRef
from mango.local import LocalProvider
from mango.local.layout import owner_record_path
from mango.postgres import PostgresBindingStore, PostgresSessionClaims

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=60.0)
HOUR = 3600.0
DOCKER_IMAGE = "mango-test-busybox:latest"
REMOTE = ("e2b", "cube", "opensandbox", "daytona")


@attrs.define
class Backend:
    """One backend: our provider, another deployment's, and how to age or break it."""

    name: str
    provider: Provider
    foreign: Provider
    age: Callable[[SandboxRef, float], None] | None
    """Make a resource look older (None: the backend's clock cannot be moved)."""
    service: Any = None
    """The fake service (faults, sandboxes), for the remote fakes."""


def _age_local(ref: SandboxRef, seconds: float) -> None:
    then = datetime.now(UTC).timestamp() - seconds
    os.utime(owner_record_path(Path(ref.external_id)), (then, then), follow_symlinks=False)


def _age_fake(service: Any) -> Callable[[SandboxRef, float], None]:
    def age(ref: SandboxRef, seconds: float) -> None:
        service.sandboxes.find(ref.external_id).created_at = datetime.now(UTC) - timedelta(
            seconds=seconds
        )

    return age


@contextlib.asynccontextmanager
async def _remote(name: str, scratch: Path, ours: str, theirs: str) -> AsyncIterator[Backend]:
    if name in ("e2b", "cube"):
        from mango_provider_e2b import E2BProvider
        from mango_provider_e2b.conformance import cube_fake_options, e2b_fake_options
        from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig

        cube = name == "cube"
        config = (
            FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local", page_size=2)
            if cube
            else FakeConfig(page_size=2)
        )
        options = cube_fake_options if cube else e2b_fake_options
        async with E2BFakeService.create(scratch, config) as service:
            made = [E2BProvider(options(service.url, config), namespace=n) for n in (ours, theirs)]
            yield Backend(name, made[0], made[1], _age_fake(service), service)
    elif name == "opensandbox":
        from mango.provider.http import RetryPolicy
        from mango_provider_opensandbox import OpenSandboxProvider
        from mango_provider_opensandbox.fake import FakeOpenSandbox

        retry = RetryPolicy(attempts=2, timeout=5.0, wait_initial=0.01, wait_max=0.05)
        async with FakeOpenSandbox(scratch, grace_seconds=0.2) as fake:
            made = [
                OpenSandboxProvider(fake.url, api_key=fake.api_key, namespace=n, retry=retry)
                for n in (ours, theirs)
            ]
            yield Backend(name, made[0], made[1], _age_fake(fake.service), fake.service)
    else:
        from mango_provider_daytona import DaytonaProvider
        from mango_provider_daytona.fake import FAKE_API_KEY, open_fake_daytona

        async with open_fake_daytona(scratch) as (service, _state):
            made = [
                DaytonaProvider(service.url, FAKE_API_KEY, namespace=n, poll_interval=0.02)
                for n in (ours, theirs)
            ]
            yield Backend(name, made[0], made[1], _age_fake(service), service)


async def _docker(scratch: Path, ours: str, theirs: str) -> Backend:
    from mango_provider_docker import DockerProvider, Engine

    host = os.environ.get("DOCKER_HOST", "").strip() or None
    engine = Engine(host)
    try:
        ready = await engine.image_exists(DOCKER_IMAGE)
    except Exception:  # noqa: BLE001 - any failure means no usable daemon here
        ready = False
    finally:
        await engine.aclose()
    if not ready:
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail("no Docker Engine with the test image (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip("no Docker Engine with the test image")
    made = [
        DockerProvider(
            scratch / n, image=DOCKER_IMAGE, host=host, pull_missing_images=False, namespace=n
        )
        for n in (ours, theirs)
    ]
    return Backend("docker", made[0], made[1], None)


@pytest.fixture(params=["local", "docker", *REMOTE])
async def backend(
    request: pytest.FixtureRequest, store: PostgresBindingStore, tmp_path: Path
) -> AsyncIterator[Backend]:
    """Each backend, in the store's namespace, beside another deployment on the same backend."""
    name: str = request.param
    ours = await store.deployment_namespace()
    theirs = f"other-{uuid.uuid4().hex[:8]}"
    if name in REMOTE:
        async with _remote(name, tmp_path / "fake", ours, theirs) as made:
            yield made
            await _close(made)
        return
    if name == "docker":
        made = await _docker(tmp_path, ours, theirs)
    else:
        made = Backend(
            name,
            LocalProvider(tmp_path / "sandboxes", namespace=ours),
            LocalProvider(tmp_path / "sandboxes", namespace=theirs),
            _age_local,
        )
    yield made
    await _close(made)


async def _close(made: Backend) -> None:
    for provider in (made.provider, made.foreign):
        for resource in await provider.list_owned():
            with contextlib.suppress(Exception):
                await provider.destroy_owned(resource)  # type: ignore[attr-defined]
        await provider.aclose()


def _refs(resources: Sequence[OwnedResource]) -> set[SandboxRef]:
    return {resource.ref for resource in resources}


async def test_gc_reports_then_sweeps_only_the_orphan(
    backend: Backend, store: PostgresBindingStore
) -> None:
    """Bound and foreign sandboxes stay; the orphan is reported with its age, then removed."""
    claims = PostgresSessionClaims(store.pool)
    manager = SessionManager(backend.provider, store)
    await manager.ensure_session("bound")
    bound = await manager.acquire("bound", SPEC)
    orphan = await backend.provider.create(f"hand-made-{uuid.uuid4().hex[:8]}", SPEC)
    theirs = await backend.foreign.create("hand-made", SPEC)
    older_than = 0.0
    if backend.age is not None:
        for ref in (bound.ref, orphan.ref, theirs.ref):
            backend.age(ref, 2 * HOUR)
        older_than = HOUR

    young = await sweep_orphans(backend.provider, claims, older_than=10 * HOUR)
    [kept] = young.items
    assert (kept.ref, kept.verdict, young.listed, young.claimed) == (
        orphan.ref,
        Verdict.TOO_YOUNG,
        2,
        1,
    )
    assert kept.age is not None
    assert kept.age >= (2 * HOUR if backend.age is not None else 0)

    report = await sweep_orphans(backend.provider, claims, older_than=older_than)
    assert [(i.ref, i.verdict, i.outcome) for i in report.items] == [
        (orphan.ref, Verdict.ORPHAN, None)
    ]
    assert _refs(await backend.provider.list_owned()) == {bound.ref, orphan.ref}

    swept = await sweep_orphans(backend.provider, claims, older_than=older_than, destroy=True)
    assert (swept.destroyed, swept.ok) == (1, True)
    assert _refs(await backend.provider.list_owned()) == {bound.ref}
    assert _refs(await backend.foreign.list_owned()) == {theirs.ref}
    assert (await bound.exec(Command(argv=("echo", "alive")))).stdout == b"alive\n"


@attrs.define
class _Pausing:
    """A provider whose create returns only when told to (the binding not yet written)."""

    inner: Provider
    created: asyncio.Event = attrs.field(factory=asyncio.Event)
    proceed: asyncio.Event = attrs.field(factory=asyncio.Event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create(self, session_key: str, spec: SandboxSpec) -> Any:
        sandbox = await self.inner.create(session_key, spec)
        self.created.set()
        await self.proceed.wait()
        return sandbox


async def test_gc_during_provisioning_keeps_the_new_sandbox(
    backend: Backend, store: PostgresBindingStore
) -> None:
    """gc --older-than 0 --yes while create has returned and the binding is not yet written."""
    pausing = _Pausing(backend.provider)
    manager = SessionManager(pausing, store)  # type: ignore[arg-type]
    await manager.ensure_session("racing")
    acquiring = asyncio.create_task(manager.acquire("racing", SPEC))
    try:
        await asyncio.wait_for(pausing.created.wait(), 60)
        assert await store.get_binding("racing") is None
        assert await store.get_intent("racing") is not None
        [listed] = await backend.provider.list_owned()
        claims = PostgresSessionClaims(store.pool)
        report = await sweep_orphans(backend.provider, claims, older_than=0, destroy=True)
        assert (report.listed, report.claimed, report.items) == (1, 1, ())
    finally:
        pausing.proceed.set()
    sandbox = await asyncio.wait_for(acquiring, 60)
    assert sandbox.ref == listed.ref
    assert (await sandbox.exec(Command(argv=("echo", "kept")))).stdout == b"kept\n"


@pytest.fixture(params=REMOTE)
async def remote(
    request: pytest.FixtureRequest, store: PostgresBindingStore, tmp_path: Path
) -> AsyncIterator[Backend]:
    """The remote fakes only."""
    theirs = f"other-{uuid.uuid4().hex[:8]}"
    async with _remote(
        request.param, tmp_path / "fake", await store.deployment_namespace(), theirs
    ) as made:
        yield made
        made.service.faults.clear()
        await _close(made)


async def _orphans(backend: Backend, count: int) -> list[SandboxRef]:
    made = []
    for number in range(count):
        sandbox = await backend.provider.create(f"orphan-{number}-{uuid.uuid4().hex[:6]}", SPEC)
        assert backend.age is not None
        backend.age(sandbox.ref, 2 * HOUR)
        made.append(sandbox.ref)
    return made


async def test_gc_sweeps_a_listing_of_several_pages(
    remote: Backend, store: PostgresBindingStore
) -> None:
    """More orphans than a page of the vendor's list: every one is found and removed."""
    if remote.name in ("e2b", "cube"):
        count = 5  # the fake's pages hold 2
    else:
        count = 101  # these providers ask for pages of 100
        for number in range(count - 3):  # made behind the client's back: fast
            labels = remote.provider.ownership.labels(f"bulk-{number}")  # type: ignore[attr-defined]
            record = await remote.service.sandboxes.create(labels)
            record.created_at = datetime.now(UTC) - timedelta(hours=2)
        count = 3
    refs = await _orphans(remote, count)
    listed = await remote.provider.list_owned()
    assert _refs(listed) >= set(refs)
    assert all(resource.created_at is not None for resource in listed)
    claims = PostgresSessionClaims(store.pool)
    swept = await sweep_orphans(remote.provider, claims, older_than=HOUR, destroy=True)
    assert swept.ok, swept
    assert swept.destroyed == len(listed) > 2
    assert await remote.provider.list_owned() == []


@attrs.define
class _BreakAfterListing:
    """Claims that let the first answer through, then make the fake fail every request."""

    inner: PostgresSessionClaims
    service: Any
    calls: int = 0

    async def claimed(self, provider: str, resources: Sequence[OwnedResource]) -> frozenset[Any]:
        answer = await self.inner.claimed(provider, resources)
        self.calls += 1
        if self.calls == 1:
            self.service.faults.fail(status=503, times=None)
        return answer


async def test_gc_stops_and_removes_nothing_when_the_provider_fails_mid_sweep(
    remote: Backend, store: PostgresBindingStore
) -> None:
    """The first ProviderUnavailable stops the pass; the rest is left for the next one."""
    refs = await _orphans(remote, 2)
    broken = _BreakAfterListing(PostgresSessionClaims(store.pool), remote.service)
    report = await sweep_orphans(remote.provider, broken, older_than=HOUR, destroy=True)
    assert not report.ok
    assert report.stopped is not None
    assert "Unavailable" in report.stopped
    assert [item.outcome for item in report.items] == [Outcome.FAILED, Outcome.NOT_ATTEMPTED]
    assert report.destroyed == 0
    remote.service.faults.clear()
    assert _refs(await remote.provider.list_owned()) == set(refs)
    again = await sweep_orphans(
        remote.provider, PostgresSessionClaims(store.pool), older_than=HOUR, destroy=True
    )
    assert (again.ok, again.destroyed) == (True, 2)


async def test_claims_on_postgres(store: PostgresBindingStore) -> None:
    """A binding claims its ref; a Session row (any state) claims its hash; nothing else does."""
    from mango.domain.hashing import binding_spec_hash, session_key_hash
    from mango.domain.values import Binding

    claims = PostgresSessionClaims(store.pool)
    await store.ensure_session("with-row")
    await store.ensure_session("bound")
    await store.put_binding(
        Binding(
            session_id="bound",
            ref=SandboxRef("local", "/x/bound"),
            spec_hash=binding_spec_hash(SPEC),
        )
    )
    await store.ensure_session("fenced")
    await store.fence_session("fenced")
    resources = [
        OwnedResource(SandboxRef("local", "/x/row"), session_key_hash("with-row")),
        OwnedResource(SandboxRef("local", "/x/bound"), "f" * 32),
        OwnedResource(SandboxRef("local", "/x/fenced"), session_key_hash("fenced")),
        OwnedResource(SandboxRef("local", "/x/nobody"), session_key_hash("nobody")),
        OwnedResource(SandboxRef("docker", "/x/bound"), "e" * 32),
    ]
    assert await claims.claimed("local", resources) == {r.ref for r in resources[:3]}
    assert await claims.claimed("local", []) == frozenset()


def test_mango_gc_command(database_url: str, tmp_path: Path) -> None:
    """The command reports (text and JSON), destroys only with --yes, refuses a bad duration."""
    import json
    import subprocess
    import sys

    mango = str(Path(sys.executable).with_name("mango"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "DOCKER_"))}
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [mango, *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )

    assert run("exec", "--session", "kept", "--", "true").returncode == 0
    listed = json.loads(run("gc", "--json").stdout)
    assert (listed["listed"], listed["claimed"], listed["resources"]) == (1, 1, [])
    sandboxes = tmp_path / "state" / "sandboxes"
    record = next(iter((sandboxes / ".owners").iterdir()))  # the kept Session's owner record
    labels = json.loads(record.read_text())["labels"]
    orphan = asyncio.run(
        LocalProvider(sandboxes, namespace=labels["io.mango.namespace"]).create("gone", SPEC)
    )
    text = run("gc", "--older-than", "0")
    assert text.returncode == 0, text.stderr
    assert "1 orphan(s) older than 0s; run 'mango gc --yes' to destroy them" in text.stdout
    assert orphan.ref.external_id in text.stdout
    young = json.loads(run("gc", "--json").stdout)  # the default margin: an hour
    assert [r["verdict"] for r in young["resources"]] == ["too-young"]
    swept = run("gc", "--yes", "--older-than", "0s", "--json")
    assert swept.returncode == 0, swept.stderr
    document = json.loads(swept.stdout)
    assert (document["destroyed"], document["ok"]) == (1, True)
    assert [r["outcome"] for r in document["resources"]] == ["destroyed"]
    assert not Path(orphan.ref.external_id).exists()
    assert run("exec", "--session", "kept", "--", "echo", "ok").stdout == "ok\n"
    bad = run("gc", "--older-than", "soon")
    assert bad.returncode == 2
    assert "--older-than must be a number of seconds" in bad.stderr
