"""SessionManager on the real PostgreSQL store with the local provider."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from mango.app import SessionManager
from mango.domain import (
    Binding,
    Command,
    PathEscapeError,
    ProviderUnavailable,
    ProvisioningIntent,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    spec_hash,
)
from mango.domain.ports import Sandbox
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore, open_store

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=30)


class Crash(Exception):
    """An injected crash."""


@attrs.define
class FaultyProvider:
    """Wraps a provider and 'crashes' at one named point between intent and binding."""

    inner: LocalProvider
    crash_at: str | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self):  # type: ignore[no-untyped-def]
        return self.inner.capabilities

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        if self.crash_at == "before-create":
            raise Crash("before create")
        sandbox = await self.inner.create(session_key, spec)
        await sandbox.write_file("made-before-crash.txt", b"keep me")
        if self.crash_at == "after-create":
            raise Crash("after create")
        return sandbox

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        return await self.inner.attach(session_key, ref, spec)

    async def find(self, session_key: str) -> SandboxRef | None:
        return await self.inner.find(session_key)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        await self.inner.destroy(session_key, ref)

    async def aclose(self) -> None:
        await self.inner.aclose()


@attrs.define
class FaultyStore:
    """Wraps the store and 'crashes' just before or just after the binding commit."""

    inner: PostgresBindingStore
    crash_at: str | None = None

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)

    async def put_binding(self, binding: Binding) -> Binding:
        if self.crash_at == "before-binding":
            raise Crash("before binding")
        winner = await self.inner.put_binding(binding)
        if self.crash_at == "after-binding":
            raise Crash("after binding commit, before the response")
        return winner


def _session_dirs(base: Path) -> list[Path]:
    return sorted(base.glob("mango-*")) if base.exists() else []


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The local provider's base directory for this test."""
    return tmp_path / "sandboxes"


async def test_32_concurrent_acquires_from_separate_managers(database_url: str, base: Path) -> None:
    """32 managers, each with its own pool, race to acquire one Session: one resource, one ref."""
    stores = [await open_store(database_url, min_size=1, max_size=2) for _ in range(32)]
    try:
        await stores[0].ensure_session("race")
        managers = [SessionManager(LocalProvider(base), store) for store in stores]
        boxes = await asyncio.gather(*(m.acquire("race", SPEC) for m in managers))
        refs = {box.ref for box in boxes}
        assert len(refs) == 1
        assert len(_session_dirs(base)) == 1
        binding = await stores[0].get_binding("race")
        assert binding is not None
        assert binding.ref == refs.pop()
        assert await stores[0].get_intent("race") is None
        await boxes[0].write_file("shared.txt", b"one workspace")
        result = await boxes[-1].exec(Command(("cat", "shared.txt")))
        assert result.stdout == b"one workspace"
    finally:
        for store in stores:
            await store.aclose()


@pytest.mark.parametrize("crash_at", ["before-create", "after-create"])
async def test_reconcile_after_provider_crash(
    store: PostgresBindingStore, base: Path, crash_at: str
) -> None:
    """A crash between intent and binding is finished by the reconciler, workspace kept."""
    await store.ensure_session("s")
    faulty = SessionManager(FaultyProvider(LocalProvider(base), crash_at), store)
    with pytest.raises(Crash):
        await faulty.acquire("s", SPEC)
    assert await store.get_binding("s") is None
    assert await store.get_intent("s") is not None

    report = await SessionManager(LocalProvider(base), store).reconcile_provisioning()
    assert (report.attempted, report.completed, report.failures) == (1, 1, ())
    assert await store.get_intent("s") is None
    binding = await store.get_binding("s")
    assert binding is not None
    assert len(_session_dirs(base)) == 1
    sandbox = await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    assert sandbox.ref == binding.ref
    if crash_at == "after-create":
        assert await sandbox.read_file("made-before-crash.txt") == b"keep me"


@pytest.mark.parametrize("crash_at", ["before-binding", "after-binding"])
async def test_reconcile_after_binding_crash(
    store: PostgresBindingStore, base: Path, crash_at: str
) -> None:
    """A crash around the binding commit converges to one binding and one workspace."""
    await store.ensure_session("s")
    provider = FaultyProvider(LocalProvider(base))
    faulty = SessionManager(provider, FaultyStore(store, crash_at))  # type: ignore[arg-type]
    with pytest.raises(Crash):
        await faulty.acquire("s", SPEC)
    committed = await store.get_binding("s")
    assert (committed is not None) == (crash_at == "after-binding")

    report = await SessionManager(LocalProvider(base), store).reconcile_provisioning()
    assert report.ok
    assert await store.get_intent("s") is None
    binding = await store.get_binding("s")
    assert binding is not None
    assert len(_session_dirs(base)) == 1
    again = await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    assert await again.read_file("made-before-crash.txt") == b"keep me"
    assert again.ref == binding.ref


@pytest.mark.parametrize("crash_at", ["before-create", "after-create", "before-binding"])
async def test_fenced_crash_is_destroyed_by_reconciler(
    store: PostgresBindingStore, base: Path, crash_at: str
) -> None:
    """A crashed provisioning of a Session being deleted is destroyed, leaving nothing."""
    await store.ensure_session("s")
    provider = FaultyProvider(
        LocalProvider(base), None if crash_at == "before-binding" else crash_at
    )
    target = FaultyStore(store, "before-binding" if crash_at == "before-binding" else None)
    with pytest.raises(Crash):
        await SessionManager(provider, target).acquire("s", SPEC)  # type: ignore[arg-type]
    await store.fence_session("s")

    report = await SessionManager(LocalProvider(base), store).reconcile_provisioning()
    assert report.ok
    assert await store.get_intent("s") is None
    assert await store.get_binding("s") is None
    assert _session_dirs(base) == []
    assert await store.delete_session("s") is True


async def test_release_with_failing_destroy_keeps_binding(
    store: PostgresBindingStore, base: Path
) -> None:
    """If destroy fails the binding and fence survive, and a later release finishes the job."""
    await store.ensure_session("s")
    await SessionManager(LocalProvider(base), store).acquire("s", SPEC)

    @attrs.define
    class BrokenProvider(FaultyProvider):
        async def destroy(self, session_key: str, ref: SandboxRef) -> None:
            raise ProviderUnavailable("backend unreachable (injected)")

    with pytest.raises(ProviderUnavailable):
        await SessionManager(BrokenProvider(LocalProvider(base)), store).release("s")
    assert await store.get_binding("s") is not None
    assert len(_session_dirs(base)) == 1
    record = await store.get_session("s")
    assert record is not None
    assert record.deleting
    assert await SessionManager(LocalProvider(base), store).delete_session("s") is True
    assert _session_dirs(base) == []


async def test_lost_workspace_is_reported_not_replaced(
    store: PostgresBindingStore, base: Path
) -> None:
    """Deleting the workspace behind mango's back gives SandboxNotFound and no new one."""
    import shutil

    await store.ensure_session("s")
    sandbox = await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    shutil.rmtree(Path(sandbox.ref.external_id).parent)
    with pytest.raises(SandboxNotFound):
        await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    assert _session_dirs(base) == []
    assert await SessionManager(LocalProvider(base), store).delete_session("s") is True


async def test_bad_input_at_the_boundary(store: PostgresBindingStore, base: Path) -> None:
    """Escaping paths and malformed intents give typed errors."""
    from mango.domain import InvalidInput

    await store.ensure_session("s")
    sandbox = await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    with pytest.raises(PathEscapeError):
        await sandbox.write_file("../outside", b"x")
    with pytest.raises(InvalidInput):
        ProvisioningIntent("", "local", SPEC, spec_hash(SPEC))
    with pytest.raises(InvalidInput):
        SandboxRef.parse("no-colon")
    with pytest.raises(InvalidInput):
        await SessionManager(LocalProvider(base), store).acquire("", SPEC)


async def test_intent_only_release_never_creates_on_postgres(
    store: PostgresBindingStore,
    make_provider,
    world,  # type: ignore[no-untyped-def]
) -> None:
    """On the real store, tearing down intent-only Sessions finds and destroys, never creates."""
    for sid in ("empty", "made"):
        await store.ensure_session(sid)
        await store.put_intent(ProvisioningIntent(sid, "memory", SPEC, spec_hash(SPEC)))
    await make_provider().create("made", SPEC)  # crashed after create, before the binding
    await store.fence_session("made")
    provider = make_provider()
    manager = SessionManager(provider, store)
    assert await manager.delete_session("empty") is True
    report = await manager.finish_deletions()
    assert (report.attempted, report.completed) == (1, 1)
    assert provider.create_calls == 0
    assert provider.finds == 2
    assert world.resources == {}
    assert await store.list_sessions() == []


async def test_loss_is_persisted_on_postgres(
    store: PostgresBindingStore,
    make_provider,
    world,  # type: ignore[no-untyped-def]
) -> None:
    """A loss seen through a cached client is stored; every later worker sees 'lost'."""
    from mango.domain import LifecycleState

    await store.ensure_session("s")
    manager = SessionManager(make_provider(), store)
    box = await manager.acquire("s", SPEC)
    world.resources.clear()
    with pytest.raises(SandboxNotFound):
        await box.write_file("a.txt", b"x")
    binding = await store.get_binding("s")
    assert binding is not None
    assert binding.lost
    assert binding.lost_at is not None
    again = await store.mark_binding_lost("s", binding.ref)
    assert again == binding  # idempotent: the first mark's time is kept
    assert await store.mark_binding_lost("s", SandboxRef("memory", "other")) is None
    fresh = make_provider()
    with pytest.raises(SandboxNotFound, match="lost"):
        await SessionManager(fresh, store).acquire("s", SPEC)
    assert (fresh.attaches, fresh.create_calls) == (0, 0)
    assert await SessionManager(fresh, store).observe("s") is LifecycleState.LOST
    assert await SessionManager(fresh, store).delete_session("s") is True
    assert world.creates == 1


async def test_lost_local_workspace_is_persisted(store: PostgresBindingStore, base: Path) -> None:
    """Attach to a vanished local workspace persists the loss; no worker attaches again."""
    import shutil

    await store.ensure_session("s")
    sandbox = await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    shutil.rmtree(Path(sandbox.ref.external_id).parent)
    with pytest.raises(SandboxNotFound, match="lost"):
        await SessionManager(LocalProvider(base), store).acquire("s", SPEC)
    binding = await store.get_binding("s")
    assert binding is not None
    assert binding.lost
    assert _session_dirs(base) == []
