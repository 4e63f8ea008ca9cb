"""SessionManager semantics on the in-memory store and provider fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import (
    CapabilityNotSupported,
    Command,
    InvalidInput,
    LifecycleCommand,
    LifecycleState,
    NetworkMode,
    OwnershipError,
    PackagePlan,
    PermanentError,
    ProvisioningIntent,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    SessionDeleting,
    spec_hash,
)

SPEC = SandboxSpec()


@pytest.fixture
def store() -> InMemoryBindingStore:
    """A fresh in-memory store."""
    return InMemoryBindingStore()


async def _manager(
    store: InMemoryBindingStore, provider: Any, session: str = "s1"
) -> SessionManager:
    manager = SessionManager(provider, store)
    await manager.ensure_session(session)
    return manager


async def test_acquire_creates_once_and_caches(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """The first acquire provisions and binds; later ones reuse the client."""
    manager = await _manager(store, make_provider())
    first = await manager.acquire("s1", SPEC)
    second = await manager.acquire("s1", SPEC)
    assert first is second
    assert world.creates == 1
    binding = await store.get_binding("s1")
    assert binding is not None
    assert binding.ref == first.ref
    assert await store.get_intent("s1") is None


async def test_concurrent_acquires_one_manager(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Concurrent acquires for one Session in one process are serialised."""
    manager = await _manager(store, make_provider(idempotent=False))
    boxes = await asyncio.gather(*(manager.acquire("s1", SPEC) for _ in range(16)))
    assert {box.ref for box in boxes} == {boxes[0].ref}
    assert world.creates == 1


async def test_losers_resource_is_destroyed(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """With a non-idempotent provider the store elects one winner; losers are destroyed."""
    managers = [await _manager(store, make_provider(idempotent=False)) for _ in range(8)]
    boxes = await asyncio.gather(*(m.acquire("s1", SPEC) for m in managers))
    assert len({box.ref for box in boxes}) == 1
    assert len(world.resources) == 1
    assert world.creates - world.destroys == 1


async def test_restarted_worker_attaches(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A fresh manager (restarted worker) attaches through the binding."""
    first = await (await _manager(store, make_provider())).acquire("s1", SPEC)
    await first.write_file("a.txt", b"kept")
    provider = make_provider()
    again = await SessionManager(provider, store).acquire("s1", SPEC)
    assert again.ref == first.ref
    assert await again.read_file("a.txt") == b"kept"
    assert provider.attaches == 1
    assert world.creates == 1


async def test_lost_reference_never_recreates(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A bound resource that vanished gives SandboxNotFound and no new resource."""
    box = await (await _manager(store, make_provider())).acquire("s1", SPEC)
    world.resources.clear()
    fresh = SessionManager(make_provider(), store)
    with pytest.raises(SandboxNotFound, match="lost"):
        await fresh.acquire("s1", SPEC)
    assert world.creates == 1
    assert (await store.get_binding("s1")).ref == box.ref  # type: ignore[union-attr]


async def test_acquire_existing_never_provisions(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """acquire_existing returns None for an unbound Session and creates nothing."""
    manager = await _manager(store, make_provider())
    assert await manager.acquire_existing("s1", SPEC) is None
    assert world.creates == 0
    assert await store.get_intent("s1") is None
    box = await manager.acquire("s1", SPEC)
    assert await SessionManager(make_provider(), store).acquire_existing("s1", SPEC) is not None
    assert box is not None


async def test_admission_before_any_write(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A spec the provider cannot run is refused before an intent is written."""
    manager = await _manager(store, make_provider())
    spec = SandboxSpec(network=NetworkMode.LIMITED, packages=PackagePlan(apt=["curl"]))
    with pytest.raises(CapabilityNotSupported) as info:
        await manager.acquire("s1", spec)
    assert len(info.value.reasons) == 2
    assert await store.get_intent("s1") is None
    assert world.creates == 0


async def test_bad_input(store: InMemoryBindingStore, make_provider: Callable[..., Any]) -> None:
    """Empty ids and unknown Sessions give typed errors."""
    manager = SessionManager(make_provider(), store)
    with pytest.raises(InvalidInput):
        await manager.acquire("", SPEC)
    with pytest.raises(InvalidInput, match="does not exist"):
        await manager.acquire("never-created", SPEC)


async def test_release_and_delete(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Release fences, destroys and unbinds; deleting twice is fine."""
    manager = await _manager(store, make_provider())
    await manager.acquire("s1", SPEC)
    assert await manager.delete_session("s1") is True
    assert world.resources == {}
    assert await store.get_binding("s1") is None
    assert await store.get_session("s1") is None
    assert await manager.delete_session("s1") is False


async def test_release_keeps_binding_when_destroy_fails(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A failing destroy keeps the binding and the fence, so a retry can finish."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    failing = SessionManager(make_provider(fail_destroy=True), store)
    with pytest.raises(RuntimeError, match="injected"):
        await failing.release("s1")
    assert await store.get_binding("s1") is not None
    assert (await store.get_session("s1")).deleting  # type: ignore[union-attr]
    with pytest.raises(SessionDeleting, match="being deleted"):
        await failing.acquire("s1", SPEC)
    with pytest.raises(SessionDeleting):
        await failing.ensure_session("s1")
    await SessionManager(make_provider(), store).delete_session("s1")
    assert world.resources == {}


async def test_release_of_lost_resource_finishes(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Release treats a lost reference as already destroyed."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    world.resources.clear()
    assert await SessionManager(make_provider(), store).delete_session("s1") is True


async def test_other_providers_binding_is_permanent(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A worker of another provider refuses to attach or release the binding."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    other = SessionManager(make_provider(name="other"), store)
    with pytest.raises(OwnershipError) as info:
        await other.acquire("s1", SPEC)
    assert "MANGO_SANDBOX=memory" in (info.value.hint or "")
    with pytest.raises(OwnershipError):
        await other.release("s1")
    assert await store.get_binding("s1") is not None


async def test_deleting_with_the_wrong_provider_fences_nothing(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Deleting another provider's Session (binding or intent) is refused before the fence."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    other = SessionManager(make_provider(name="other"), store)
    with pytest.raises(OwnershipError, match="belongs to provider 'memory'"):
        await other.delete_session("s1")
    record = await store.get_session("s1")
    assert record is not None
    assert not record.deleting
    assert world.destroys == 0

    await store.ensure_session("s2")
    await store.put_intent(
        ProvisioningIntent(session_id="s2", provider="memory", spec=SPEC, spec_hash=spec_hash(SPEC))
    )
    with pytest.raises(OwnershipError, match="belongs to provider 'memory'"):
        await other.delete_session("s2")
    second = await store.get_session("s2")
    assert second is not None
    assert not second.deleting
    # The right provider deletes both as usual.
    owner = SessionManager(make_provider(), store)
    assert await owner.delete_session("s1") is True
    assert await owner.delete_session("s2") is True


async def test_changed_package_plan_is_permanent(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A live sandbox is never re-provisioned for a different package plan."""
    from mango.domain import Capability, CapabilitySet

    provider = make_provider(capabilities=CapabilitySet.of(Capability.PACKAGE_SETUP))
    manager = await _manager(store, provider)
    await manager.acquire("s1", SandboxSpec(packages=PackagePlan(pip=["a"])))
    with pytest.raises(PermanentError, match="package plan"):
        await SessionManager(provider, store).acquire(
            "s1", SandboxSpec(packages=PackagePlan(pip=["b"]))
        )


async def test_reconcile_finishes_intent_only_sessions(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """An intent left by a crash is completed (or destroyed if fenced)."""
    from mango.domain import ProvisioningIntent, spec_hash

    for sid in ("a", "b"):
        await store.ensure_session(sid)
        await store.put_intent(ProvisioningIntent(sid, "memory", SPEC, spec_hash(SPEC)))
    await store.fence_session("b")
    report = await SessionManager(make_provider(), store).reconcile_provisioning()
    assert report.ok
    assert (report.attempted, report.completed) == (2, 2)
    assert await store.get_binding("a") is not None
    assert await store.get_intent("b") is None
    assert len(world.resources) == 1


async def test_reconcile_isolates_failures(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """One failing intent does not stop the others."""
    from mango.domain import ProvisioningIntent, spec_hash

    bad_spec = SandboxSpec(packages=PackagePlan(pip=["x"]))  # memory provider cannot install
    for sid, spec in (("bad", bad_spec), ("good", SPEC)):
        await store.ensure_session(sid)
        await store.put_intent(ProvisioningIntent(sid, "memory", spec, spec_hash(spec)))
    report = await SessionManager(make_provider(), store).reconcile_provisioning()
    assert report.completed == 1
    assert [sid for sid, _ in report.failures] == ["bad"]
    assert await store.get_binding("good") is not None


async def test_put_binding_winner_returned(store: InMemoryBindingStore) -> None:
    """The in-memory store returns the first binding to later writers."""
    from mango.domain import Binding

    await store.ensure_session("s")
    first = await store.put_binding(Binding("s", SandboxRef("memory", "one"), "h"))
    second = await store.put_binding(Binding("s", SandboxRef("memory", "two"), "h"))
    assert second == first


async def test_fence_from_another_process_beats_the_cache(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A manager with a cached client still refuses a Session another worker fenced."""
    cached = await _manager(store, make_provider())
    await cached.acquire("s1", SPEC)
    await store.fence_session("s1")
    with pytest.raises(SessionDeleting):
        await cached.acquire("s1", SPEC)


async def test_recreated_session_does_not_reuse_a_stale_client(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A Session deleted and re-created elsewhere gets a new sandbox, not the stale cache."""
    stale = await _manager(store, make_provider(idempotent=False))
    first = await stale.acquire("s1", SPEC)
    other = SessionManager(make_provider(idempotent=False), store)
    assert await other.delete_session("s1") is True
    await other.ensure_session("s1")
    second = await stale.acquire("s1", SPEC)
    assert second.ref != first.ref
    assert first.ref.external_id not in world.resources
    assert second.ref.external_id in world.resources


async def test_every_effect_has_a_handler() -> None:
    """The manager performs every effect the lifecycle table can ask for."""
    from mango.app.session_manager import default_handlers
    from mango.domain import LifecycleEffect

    assert set(default_handlers().effects) == set(LifecycleEffect)


async def test_intent_only_release_never_creates(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Tearing down an intent-only Session asks find and destroys; it never calls create."""
    from mango.domain import ProvisioningIntent, spec_hash

    for sid in ("empty", "made"):
        await store.ensure_session(sid)
        await store.put_intent(ProvisioningIntent(sid, "memory", SPEC, spec_hash(SPEC)))
    crashed = make_provider()
    await crashed.create("made", SPEC)  # the crash came after create, before the binding
    provider = make_provider()
    manager = SessionManager(provider, store)
    assert await manager.delete_session("empty") is True
    assert await manager.delete_session("made") is True
    assert provider.create_calls == 0
    assert provider.finds == 2
    assert world.resources == {}
    assert world.destroys == 1


async def test_bound_release_destroys_without_attaching(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A restarted worker deletes a bound Session by reference, paying for no attach."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    provider = make_provider()
    assert await SessionManager(provider, store).delete_session("s1") is True
    assert (provider.attaches, provider.create_calls, provider.finds) == (0, 0, 0)
    assert world.resources == {}


async def test_cached_client_loss_is_persisted(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """SandboxNotFound from a handed-out client evicts it and marks the binding lost."""
    from mango.domain import LifecycleState

    provider = make_provider()
    manager = await _manager(store, provider)
    box = await manager.acquire("s1", SPEC)
    world.resources.clear()
    with pytest.raises(SandboxNotFound):
        await box.exec(Command(("true",)))
    binding = await store.get_binding("s1")
    assert binding is not None
    assert binding.lost
    assert await manager.observe("s1") is LifecycleState.LOST
    for reader in (manager, SessionManager(make_provider(), store)):
        with pytest.raises(SandboxNotFound, match="lost"):
            await reader.acquire("s1", SPEC)
        with pytest.raises(SandboxNotFound):
            await reader.acquire_existing("s1", SPEC)
    assert provider.attaches == 0  # the persisted mark decides; nobody attaches to find out
    assert world.creates == 1
    assert await manager.delete_session("s1") is True


async def test_attach_not_found_records_the_loss(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A failed attach persists the loss, so the next worker does not attach again."""
    await (await _manager(store, make_provider())).acquire("s1", SPEC)
    world.resources.clear()
    first = make_provider()
    with pytest.raises(SandboxNotFound, match="lost"):
        await SessionManager(first, store).acquire("s1", SPEC)
    assert first.attaches == 1
    assert (await store.get_binding("s1")).lost  # type: ignore[union-attr]
    second = make_provider()
    with pytest.raises(SandboxNotFound, match="lost"):
        await SessionManager(second, store).acquire("s1", SPEC)
    assert (second.attaches, second.create_calls) == (0, 0)


async def test_stale_client_never_marks_a_newer_binding(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A loss reported through an old client leaves a re-created Session's binding alone."""
    stale = await _manager(store, make_provider(idempotent=False))
    old = await stale.acquire("s1", SPEC)
    other = SessionManager(make_provider(idempotent=False), store)
    await other.delete_session("s1")
    await other.ensure_session("s1")
    await other.acquire("s1", SPEC)
    with pytest.raises(SandboxNotFound):
        await old.read_file("x")
    assert not (await store.get_binding("s1")).lost  # type: ignore[union-attr]


async def test_keep_alive_on_every_acquire(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Cached and attached clients are kept alive before they are handed out."""
    manager = await _manager(store, make_provider(keep_alive=True))
    await manager.acquire("s1", SPEC)
    assert world.keep_alives == 0  # a sandbox created just now needs no resume
    await manager.acquire("s1", SPEC)
    assert world.keep_alives == 1
    await SessionManager(make_provider(keep_alive=True), store).acquire("s1", SPEC)
    assert world.keep_alives == 2


async def test_keep_alive_not_found_is_lost(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """SandboxNotFound from keep-alive of a cached client is a persisted loss."""
    manager = await _manager(store, make_provider(keep_alive=True))
    await manager.acquire("s1", SPEC)
    world.resources.clear()
    with pytest.raises(SandboxNotFound, match="lost"):
        await manager.acquire("s1", SPEC)
    assert (await store.get_binding("s1")).lost  # type: ignore[union-attr]
    assert world.creates == 1


async def test_package_setup_is_bounded_by_the_deadline(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Each package command's timeout is what remains of the caller's deadline."""
    from mango.domain import Capability, CapabilitySet
    from mango.domain.deadline import MIN_MAINTENANCE_TIMEOUT, deadline_in

    provider = make_provider(capabilities=CapabilitySet.of(Capability.PACKAGE_SETUP))
    spec = SandboxSpec(packages=PackagePlan(pip=["a"]), timeout=600)
    manager = await _manager(store, provider)
    await manager.acquire("s1", spec, deadline=deadline_in(30))
    assert [c.argv[-1] for c in world.commands] == ["a"]
    timeout = world.commands[0].timeout
    assert timeout is not None
    assert 0 < timeout <= 30
    await manager.ensure_session("s2")
    await manager.acquire("s2", spec)
    assert world.commands[-1].timeout == 600
    await manager.ensure_session("s3")
    await manager.acquire("s3", spec, deadline=deadline_in(-5))
    assert world.commands[-1].timeout == MIN_MAINTENANCE_TIMEOUT


# ------------------------------------------------------------------ the table is data

FLUSH = "flush-memory"
"""A step of the next issues (the final memory write-back on delete), as a no-op."""


def _with_flush() -> Any:
    from mango.domain.lifecycle import LIFECYCLE, LifecycleCommand, LifecycleState, Transition

    teardown = LIFECYCLE.step(LifecycleState.BOUND, LifecycleCommand.DELETE)
    effects = (teardown.effects[0], FLUSH, *teardown.effects[1:])
    row = Transition(teardown.state, effects, guards=teardown.guards)
    deleting = [state for state in LifecycleState if state is not LifecycleState.DELETED]
    return LIFECYCLE.with_transitions({(state, LifecycleCommand.DELETE): row for state in deleting})


async def test_a_new_effect_runs_where_the_table_puts_it(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A no-op effect added to a copy of the table runs after the fence, before the destroy."""
    from mango.app.session_manager import EffectHandler, default_handlers
    from mango.app.session_manager.context import Done

    seen: list[tuple[bool, bool, bool]] = []

    async def flush(ports: Any, session_id: str) -> Done:
        record = await ports.store.get_session(session_id)
        binding = await ports.store.get_binding(session_id)
        alive = binding is not None and binding.ref.external_id in world.resources
        seen.append((record is not None and record.deleting, binding is not None, alive))
        return Done()

    handlers = default_handlers().with_effect(
        FLUSH, EffectHandler(gather=lambda facts: facts.session_id, perform=flush)
    )
    manager = SessionManager(make_provider(), store, table=_with_flush(), handlers=handlers)
    await manager.ensure_session("s1")
    await manager.acquire("s1", SPEC)
    assert seen == []
    assert await manager.delete_session("s1") is True
    assert seen == [(True, True, True)]  # fenced, still bound, resource still there
    assert world.resources == {}
    assert await store.get_session("s1") is None


async def test_a_table_without_handlers_for_its_effects_is_refused(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A SessionManager checks its table against its handlers when it is built."""
    from mango.domain.errors import LifecycleTableError

    with pytest.raises(LifecycleTableError, match="no handler for effect flush-memory"):
        SessionManager(make_provider(), store, table=_with_flush())


async def test_a_handler_must_report_the_signals_the_table_declares(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """An attach handler that cannot report 'lost' does not fit the default table."""
    from mango.app.session_manager import EffectHandler, default_handlers
    from mango.app.session_manager.context import Attached
    from mango.domain import LifecycleEffect
    from mango.domain.errors import LifecycleTableError

    attach = default_handlers().effects[LifecycleEffect.ATTACH_RESOURCE]
    blind = EffectHandler(gather=attach.gather, perform=attach.perform, outcomes=(Attached,))
    handlers = default_handlers().with_effect(LifecycleEffect.ATTACH_RESOURCE, blind)
    with pytest.raises(LifecycleTableError, match="the table declares"):
        SessionManager(make_provider(), store, handlers=handlers)


async def test_an_outcome_the_handler_does_not_declare_fails(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A handler that reports something it did not declare stops the command."""
    from mango.app.session_manager import EffectHandler, default_handlers
    from mango.app.session_manager.context import Ready
    from mango.domain.errors import LifecycleTableError

    async def flush(ports: Any, session_id: str) -> Ready:
        return Ready()

    handlers = default_handlers().with_effect(
        FLUSH, EffectHandler(gather=lambda facts: facts.session_id, perform=flush)
    )
    manager = SessionManager(make_provider(), store, table=_with_flush(), handlers=handlers)
    await manager.ensure_session("s1")
    await manager.acquire("s1", SPEC)
    with pytest.raises(LifecycleTableError, match="reported Ready"):
        await manager.release("s1")
    assert len(world.resources) == 1  # stopped before the destroy


def _readme_example() -> str:
    """The Python block of the mango-core README's lifecycle section."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    section = readme.read_text(encoding="utf-8").split("### The lifecycle table", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_readme_example_of_a_new_step_runs(tmp_path: Path) -> None:
    """The mango-core README's lifecycle example builds a manager that deletes as usual."""
    from mango.local import LocalProvider

    provider = LocalProvider(tmp_path)
    namespace: dict[str, Any] = {"provider": provider, "store": InMemoryBindingStore()}
    exec(_readme_example(), namespace)  # noqa: S102 - our own README's example
    manager = namespace["manager"]
    teardown = manager.table.step(LifecycleState.BOUND, LifecycleCommand.DELETE)
    assert teardown.effects[1] == "flush-memory"
    await manager.ensure_session("s1")
    await manager.acquire("s1", SPEC)
    assert await provider.find("s1") is not None
    assert await manager.delete_session("s1") is True
    assert await provider.find("s1") is None
