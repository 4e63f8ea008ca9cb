"""The fleet rules on real PostgreSQL with the local provider: the limit, last use, eviction.

The limit test races many acquires from two SessionManagers, each on its own
connection pool (two stores, as two workers would be), while a watcher counts
the sandboxes on disk and the places taken in the database: neither ever
exceeds the limit, and every refused acquire leaves no intent, no binding
and no sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.domain import (
    Command,
    FleetFull,
    LifecycleState,
    ProvisioningIntent,
    SandboxEvicted,
    SandboxSpec,
    spec_hash,
)
from mango.domain.fleet import EvictAction
from mango.domain.ports import PausableSandbox, Provider
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore, open_store

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=30)
LIMIT = 5
SESSIONS = 24
HOUR = 3600.0
DOCKER_IMAGE = "mango-test-busybox:latest"


def _sandboxes(base: Path) -> int:
    return len([p for p in base.iterdir() if p.name.startswith("mango-")]) if base.exists() else 0


async def _backdate(store: PostgresBindingStore, session_id: str, seconds: float) -> None:
    """Make the Session's last use older (an idle Session, without waiting for it)."""
    async with store.pool.connection() as conn:
        await conn.execute(
            "UPDATE mango_sandbox_bindings"
            " SET last_used_at = last_used_at - make_interval(secs => %s) WHERE session_id = %s",
            (seconds, session_id),
        )


@contextlib.asynccontextmanager
async def _two_workers(database_url: str) -> AsyncIterator[list[PostgresBindingStore]]:
    stores = [await open_store(database_url, min_size=1, max_size=8) for _ in range(2)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.aclose()


async def test_concurrent_acquires_never_exceed_the_limit(
    database_url: str, tmp_path: Path
) -> None:
    """Two workers race 24 first acquires under a limit of 5: exactly 5 sandboxes, 19 refusals."""
    base = tmp_path / "sandboxes"
    async with _two_workers(database_url) as stores:
        managers = [
            SessionManager(LocalProvider(base), store, max_sandboxes=LIMIT) for store in stores
        ]
        names = [f"s{n}" for n in range(SESSIONS)]
        for name in names:
            await stores[0].ensure_session(name)
        done = asyncio.Event()
        peaks = {"disk": 0, "places": 0}

        async def watch() -> None:
            while not done.is_set():
                peaks["disk"] = max(peaks["disk"], _sandboxes(base))
                peaks["places"] = max(peaks["places"], await stores[0].live_sandboxes())
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            outcomes = await asyncio.gather(
                *(managers[n % 2].acquire(name, SPEC) for n, name in enumerate(names)),
                return_exceptions=True,
            )
        finally:
            done.set()
            await watcher
        bound = [
            name
            for name, got in zip(names, outcomes, strict=True)
            if not isinstance(got, BaseException)
        ]
        refused = [got for got in outcomes if isinstance(got, FleetFull)]
        assert len(refused) == len(outcomes) - len(bound), outcomes
        assert (len(bound), len(refused)) == (LIMIT, SESSIONS - LIMIT)
        assert {err.limit for err in refused} == {LIMIT}
        assert all("MANGO_MAX_SANDBOXES=5" in str(err) for err in refused)
        assert peaks["disk"] <= LIMIT
        assert peaks["places"] <= LIMIT
        assert _sandboxes(base) == LIMIT
        assert await stores[1].live_sandboxes() == LIMIT
        for name in names:
            has_binding = await stores[0].get_binding(name) is not None
            assert has_binding == (name in bound)
            assert await stores[0].get_intent(name) is None  # nothing is left half-made
        # A deleted Session frees its place for a refused one.
        assert await managers[0].delete_session(bound[0])
        refused_name = next(name for name in names if name not in bound)
        sandbox = await managers[1].acquire(refused_name, SPEC)
        assert (await sandbox.exec(Command(("echo", "in")))).stdout == b"in\n"


async def test_an_unreserved_intent_from_before_is_counted_once_resumed(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """An intent a crash left before its reservation holds no place until it is resumed."""
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), store, max_sandboxes=1)
    for name in ("crashed", "other"):
        await store.ensure_session(name)
    await store.put_intent(ProvisioningIntent("crashed", "local", SPEC, spec_hash(SPEC)))
    assert await store.live_sandboxes() == 0
    report = await manager.reconcile_provisioning()
    assert report.ok, report.failures
    assert await manager.observe("crashed") is LifecycleState.BOUND
    with pytest.raises(FleetFull):
        await manager.acquire("other", SPEC)


async def test_an_idle_session_is_evicted_for_every_worker(
    database_url: str, store: PostgresBindingStore, tmp_path: Path
) -> None:
    """Eviction destroys the sandbox; any worker's next acquire says it was evicted, not lost."""
    base = tmp_path / "sandboxes"
    manager = SessionManager(LocalProvider(base), store, max_sandboxes=1)
    await store.ensure_session("idle")
    await store.ensure_session("next")
    sandbox = await manager.acquire("idle", SPEC)
    await sandbox.write_file("work.txt", b"unsaved")
    assert await store.list_idle("local", HOUR) == []
    await _backdate(store, "idle", 2 * HOUR)
    [listed] = await store.list_idle("local", HOUR)
    assert listed.session_id == "idle"
    report = await manager.evict_idle(HOUR)
    assert (report.ok, report.evicted) == (True, 1), report
    assert _sandboxes(base) == 0
    async with await open_store(database_url) as other_worker:
        restarted = SessionManager(LocalProvider(base), other_worker)
        assert await restarted.observe("idle") is LifecycleState.EVICTED
        with pytest.raises(SandboxEvicted, match=r"evicted after 2h unused .*was destroyed"):
            await restarted.acquire("idle", SPEC)
        binding = await other_worker.get_binding("idle")
        assert binding is not None
        assert binding.eviction is not None
        assert binding.eviction.finished
        assert binding.eviction.idle_seconds >= 2 * HOUR
        assert not binding.lost
    assert await store.list_idle("local", HOUR) == []  # finished: nothing more to do
    await manager.acquire("next", SPEC)  # the place is free again
    assert await manager.delete_session("idle")


async def test_a_use_recorded_after_the_listing_keeps_the_sandbox(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """The eviction mark compares the stored last use: a worker's acquire in between wins."""
    base = tmp_path / "sandboxes"
    evictor = SessionManager(LocalProvider(base), store)
    await store.ensure_session("busy")
    await evictor.acquire("busy", SPEC)
    await _backdate(store, "busy", 2 * HOUR)
    [listed] = await store.list_idle("local", HOUR)
    user = SessionManager(LocalProvider(base), store)  # a worker that has no cached client
    await user.acquire(listed.session_id, SPEC)
    assert not await evictor.evict("busy", idle_for=HOUR)
    assert await evictor.observe("busy") is LifecycleState.BOUND
    assert _sandboxes(base) == 1
    assert await store.list_idle("local", HOUR) == []


async def test_a_fenced_session_is_not_evicted(store: PostgresBindingStore, tmp_path: Path) -> None:
    """A Session being deleted is the deletion's business, not the eviction's."""
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), store)
    await store.ensure_session("going")
    await manager.acquire("going", SPEC)
    await _backdate(store, "going", 2 * HOUR)
    await store.fence_session("going")
    assert await store.list_idle("local", HOUR) == []
    binding = await store.get_binding("going")
    assert binding is not None
    assert await store.mark_evicted("going", binding.ref, HOUR) is None


def test_mango_exec_refuses_past_the_limit(database_url: str, tmp_path: Path) -> None:
    """``mango exec`` under MANGO_MAX_SANDBOXES: a clear one-line error and hint, exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "DOCKER_"))}
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_LOCAL_SANDBOX_DIR=str(tmp_path / "sandboxes"),
        MANGO_DISABLE_PLUGINS="1",
        MANGO_MAX_SANDBOXES="1",
    )
    mango = str(Path(sys.executable).with_name("mango"))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [mango, *args], capture_output=True, env={**env, **extra}, timeout=120, check=False
        )

    first = run("exec", "--session", "one", "--", "echo", "ok")
    assert (first.returncode, first.stdout) == (0, b"ok\n"), first.stderr
    again = run("exec", "--session", "one", "--", "echo", "again")
    assert again.returncode == 0, again.stderr  # a bound Session needs no new place
    refused = run("exec", "--session", "two", "--", "echo", "no")
    assert refused.returncode == 2
    error, hint = refused.stderr.decode().splitlines()
    assert error.startswith("error: provider 'local' cannot run this sandbox: ")
    assert "MANGO_MAX_SANDBOXES=1" in error
    assert hint.startswith("hint: delete Sessions that are done")
    assert _sandboxes(tmp_path / "sandboxes") == 1

    async def evict_one() -> None:
        async with await open_store(database_url) as store:
            await _backdate(store, "one", 2 * HOUR)
            namespace = await store.deployment_namespace()  # as the command line's provider
            provider = LocalProvider(tmp_path / "sandboxes", namespace=namespace)
            assert await SessionManager(provider, store).evict("one", idle_for=HOUR)

    asyncio.run(evict_one())
    listed = run("sessions", "list")
    assert b"evicted" in listed.stdout, listed
    evicted = run("exec", "--session", "one", "--", "true")
    assert evicted.returncode == 2
    assert b"was evicted after 2h unused" in evicted.stderr
    assert b"hint: delete the session" in evicted.stderr
    assert run("exec", "--session", "two", "--", "echo", "now").stdout == b"now\n"
    bad = run("exec", "--session", "two", "--", "true", MANGO_MAX_SANDBOXES="none")
    assert bad.returncode == 2
    assert b"MANGO_MAX_SANDBOXES must be a whole number" in bad.stderr
    assert b"Traceback" not in refused.stderr + bad.stderr


def _provider(name: str, scratch: Path, namespace: str) -> Provider:
    if name == "docker":
        from mango_provider_docker import DockerProvider

        host = os.environ.get("DOCKER_HOST", "").strip() or None
        return DockerProvider(
            scratch, image=DOCKER_IMAGE, host=host, pull_missing_images=False, namespace=namespace
        )
    return LocalProvider(scratch, namespace=namespace)


async def test_eviction_removes_the_resource_at_the_backend(
    provider_name: str, store: PostgresBindingStore, tmp_path: Path
) -> None:
    """On local and Docker: the evicted sandbox is gone from the backend; deletion still works."""
    namespace = await store.deployment_namespace()
    provider = _provider(provider_name, tmp_path / "backend", namespace)
    manager = SessionManager(provider, store, evict_action=EvictAction.DESTROY)
    try:
        await store.ensure_session("idle")
        sandbox = await manager.acquire("idle", SPEC)
        assert (await sandbox.exec(Command(("echo", "up")))).stdout == b"up\n"
        assert len(await provider.list_owned()) == 1
        await _backdate(store, "idle", 2 * HOUR)
        assert (await manager.evict_idle(HOUR)).evicted == 1
        assert await provider.list_owned() == []
        with pytest.raises(SandboxEvicted):
            await manager.acquire("idle", SPEC)
        assert await manager.delete_session("idle")
        assert await store.get_session("idle") is None
    finally:
        for resource in await provider.list_owned():
            await provider.destroy_owned(resource)  # type: ignore[attr-defined]
        await manager.aclose()


async def test_idle_eviction_pauses_where_the_provider_can(
    provider_name: str, store: PostgresBindingStore, tmp_path: Path
) -> None:
    """By default Docker's idle sandbox pauses (kept, resumed on acquire); local's is destroyed."""
    namespace = await store.deployment_namespace()
    provider = _provider(provider_name, tmp_path / "backend", namespace)
    manager = SessionManager(provider, store)
    try:
        await store.ensure_session("idle")
        sandbox = await manager.acquire("idle", SPEC)
        await sandbox.write_file("kept.txt", b"kept")
        await _backdate(store, "idle", 2 * HOUR)
        report = await manager.evict_idle(HOUR)
        assert (report.evicted, report.action) == (1, manager.idle_action)
        if provider_name == "local":  # no pause: the eviction destroys, as before
            assert report.action == "destroy"
            assert await provider.list_owned() == []
            return
        assert report.action == "pause"
        assert await manager.observe("idle") is LifecycleState.PAUSED
        binding = await store.get_binding("idle")
        assert binding is not None
        assert binding.pause_finished
        raw = await provider.attach("idle", binding.ref, SPEC)
        assert isinstance(raw, PausableSandbox)
        assert await raw.is_paused()
        assert (await manager.evict_idle(HOUR)).attempted == 0  # a finished pause is not listed
        again = await manager.acquire("idle", SPEC)
        assert not await raw.is_paused()
        assert await again.read_file("kept.txt") == b"kept"
        assert await manager.observe("idle") is LifecycleState.BOUND
    finally:
        for resource in await provider.list_owned():
            await provider.destroy_owned(resource)  # type: ignore[attr-defined]
        await manager.aclose()


async def test_a_crash_between_the_pause_mark_and_the_provider_is_finished(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """A mark left without the provider's pause: the next pass pauses; the next acquire resumes."""
    provider = LocalProvider(tmp_path / "backend", namespace=await store.deployment_namespace())
    manager = SessionManager(provider, store)
    try:
        await store.ensure_session("s")
        sandbox = await manager.acquire("s", SPEC)
        marked = await store.mark_paused("s", sandbox.ref)  # the worker died right here
        assert marked is not None
        assert not marked.pause_finished
        listed = await store.list_idle(provider.name, HOUR)
        assert [b.session_id for b in listed] == ["s"]  # an unconfirmed pause is listed
        record = await store.get_session("s")
        assert record is not None
        assert record.paused  # projected onto the row every operation reads
        assert not await store.record_use("s", sandbox.ref)
        assert await manager.observe("s") is LifecycleState.PAUSED
        await store.clear_paused("s", sandbox.ref)
        assert await manager.observe("s") is LifecycleState.BOUND
        assert await store.record_use("s", sandbox.ref)
    finally:
        await manager.aclose()
