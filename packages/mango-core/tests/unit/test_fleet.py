"""The fleet rules on the in-memory store: the sandbox limit, last use, idle eviction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import (
    AdmissionRejected,
    Command,
    FleetFull,
    InvalidInput,
    LifecycleState,
    ProviderUnavailable,
    ProvisioningIntent,
    SandboxEvicted,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    spec_hash,
)

SPEC = SandboxSpec()
HOUR = 3600.0
ECHO = Command(("echo", "hi"))


@pytest.fixture
def store() -> InMemoryBindingStore:
    """A fresh in-memory store."""
    return InMemoryBindingStore()


async def _sessions(manager: SessionManager, *names: str) -> None:
    for name in names:
        await manager.ensure_session(name)


# ------------------------------------------------------------------ the limit


async def test_the_limit_refuses_the_next_acquire_and_leaves_nothing(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Past MANGO_MAX_SANDBOXES an acquire fails naming the limit; no intent, no resource."""
    manager = SessionManager(make_provider(), store, max_sandboxes=2)
    await _sessions(manager, "a", "b", "c")
    await manager.acquire("a", SPEC)
    await manager.acquire("b", SPEC)
    with pytest.raises(FleetFull) as refused:
        await manager.acquire("c", SPEC)
    assert isinstance(refused.value, AdmissionRejected)
    assert refused.value.permanent
    assert refused.value.limit == 2
    assert "MANGO_MAX_SANDBOXES=2" in str(refused.value)
    assert refused.value.hint is not None
    assert await store.get_intent("c") is None
    assert await store.get_binding("c") is None
    assert await manager.observe("c") is LifecycleState.UNBOUND
    assert world.creates == 2
    assert await store.live_sandboxes() == 2


async def test_a_bound_session_is_not_counted_twice(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """Acquiring a bound Session again needs no place: the limit is about new sandboxes."""
    manager = SessionManager(make_provider(), store, max_sandboxes=1)
    await _sessions(manager, "a")
    first = await manager.acquire("a", SPEC)
    restarted = SessionManager(make_provider(), store, max_sandboxes=1)
    assert (await restarted.acquire("a", SPEC)).ref == first.ref


async def test_deleting_or_losing_a_sandbox_frees_its_place(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """The place goes with the binding: a deleted Session's, and a lost one's."""
    manager = SessionManager(make_provider(), store, max_sandboxes=1)
    await _sessions(manager, "a", "b", "c")
    await manager.acquire("a", SPEC)
    with pytest.raises(FleetFull):
        await manager.acquire("b", SPEC)
    assert await manager.delete_session("a")
    sandbox = await manager.acquire("b", SPEC)
    world.resources.pop(sandbox.ref.external_id)  # gone behind mango's back
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(ECHO)
    assert await manager.observe("b") is LifecycleState.LOST
    await manager.acquire("c", SPEC)
    assert await store.live_sandboxes() == 1


async def test_a_resumed_intent_keeps_its_place(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """An intent that took its place before a crash is resumed even when the fleet is full."""
    manager = SessionManager(make_provider(), store, max_sandboxes=1)
    await _sessions(manager, "a", "b")
    intent = ProvisioningIntent("a", "memory", SPEC, spec_hash(SPEC))
    await store.put_intent(intent)
    assert await store.reserve_slot(intent, 1)  # the crash came after the reservation
    with pytest.raises(FleetFull):
        await manager.acquire("b", SPEC)
    report = await manager.reconcile_provisioning()
    assert (report.ok, report.completed) == (True, 1)
    assert await manager.observe("a") is LifecycleState.BOUND
    assert world.creates == 1


async def test_an_intent_without_a_place_is_refused_when_resumed(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """A crash before the reservation left an intent with nothing created: a full fleet drops it."""
    manager = SessionManager(make_provider(), store, max_sandboxes=1)
    await _sessions(manager, "a", "b")
    await manager.acquire("a", SPEC)
    await store.put_intent(ProvisioningIntent("b", "memory", SPEC, spec_hash(SPEC)))
    report = await manager.reconcile_provisioning()
    assert [sid for sid, _ in report.failures] == ["b"]
    assert "FleetFull" in report.failures[0][1]
    assert await store.get_intent("b") is None
    assert world.creates == 1


async def test_no_limit_still_marks_places(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """Without a limit every sandbox still takes its place, so a limit set later counts them."""
    manager = SessionManager(make_provider(), store)
    await _sessions(manager, "a", "b")
    await manager.acquire("a", SPEC)
    await manager.acquire("b", SPEC)
    assert await store.live_sandboxes() == 2
    limited = SessionManager(make_provider(), store, max_sandboxes=2)
    await limited.ensure_session("c")
    with pytest.raises(FleetFull):
        await limited.acquire("c", SPEC)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "3"])
def test_a_bad_limit_is_refused(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], bad: object
) -> None:
    """The limit is a positive whole number."""
    with pytest.raises(InvalidInput, match="max_sandboxes"):
        SessionManager(make_provider(), store, max_sandboxes=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ last use


@attrs.define
class CountingStore:
    """The in-memory store, counting the uses written."""

    inner: InMemoryBindingStore
    uses: int = 0

    async def record_use(self, session_id: str, ref: SandboxRef) -> bool:
        self.uses += 1
        return await self.inner.record_use(session_id, ref)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_busy_session_writes_its_use_coarsely(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """Many acquires within the interval write the use once (at attach), not once each."""
    counting = CountingStore(store)
    first = SessionManager(make_provider(), counting)  # type: ignore[arg-type]
    await first.ensure_session("a")
    await first.acquire("a", SPEC)  # the binding's creation is its first use
    for _ in range(20):
        await first.acquire("a", SPEC)
    assert counting.uses == 0
    restarted = SessionManager(make_provider(), counting)  # type: ignore[arg-type]
    for _ in range(20):
        await restarted.acquire("a", SPEC)
    assert counting.uses == 1  # the attach after the restart; then the cached client
    eager = SessionManager(make_provider(), counting, use_interval=0)  # type: ignore[arg-type]
    for _ in range(3):
        await eager.acquire("a", SPEC)
    assert counting.uses == 4


# ------------------------------------------------------------------ idle eviction


async def test_an_idle_session_is_evicted_and_the_next_acquire_says_so(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """The eviction destroys an unused Session's sandbox; acquiring again names the eviction."""
    manager = SessionManager(make_provider(), store, max_sandboxes=1)
    await _sessions(manager, "a", "b")
    sandbox = await manager.acquire("a", SPEC)
    store.backdate_use("a", 2 * HOUR)
    report = await manager.evict_idle(HOUR)
    assert (report.ok, report.attempted, report.evicted, report.kept) == (True, 1, 1, 0)
    assert sandbox.ref.external_id not in world.resources
    assert await manager.observe("a") is LifecycleState.EVICTED
    for acquire in (manager.acquire, manager.acquire_existing):
        with pytest.raises(SandboxEvicted) as evicted:
            await acquire("a", SPEC)
        assert "evicted after 2h unused" in str(evicted.value)
        assert "its workspace was destroyed" in str(evicted.value)
        assert evicted.value.finished
        assert evicted.value.idle_seconds >= 2 * HOUR
        assert isinstance(evicted.value, SandboxNotFound)
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(ECHO)  # a client handed out before meets the destroy
    assert await manager.observe("a") is LifecycleState.EVICTED  # not reported as lost
    await manager.acquire("b", SPEC)  # the eviction freed the place
    assert world.creates == 2
    assert await manager.delete_session("a")


async def test_a_session_used_since_it_was_listed_keeps_its_sandbox(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """The mark is a compare-and-set on the last use: an acquire in between wins."""
    evictor = SessionManager(make_provider(), store)
    user = SessionManager(make_provider(), store)
    await _sessions(evictor, "a")
    await user.acquire("a", SPEC)
    store.backdate_use("a", 2 * HOUR)
    [listed] = await store.list_idle("memory", HOUR)
    await SessionManager(make_provider(), store).acquire("a", SPEC)  # a worker uses it now
    assert not await evictor.evict(listed.session_id, idle_for=HOUR)
    assert await evictor.observe("a") is LifecycleState.BOUND
    assert len(world.resources) == 1
    assert (await evictor.evict_idle(HOUR)).attempted == 0


async def test_a_cached_client_meets_the_eviction_mark(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """A worker that cached the client before the eviction fails its next acquire, saying so."""
    user = SessionManager(make_provider(), store, use_interval=0)
    await _sessions(user, "a")
    await user.acquire("a", SPEC)
    store.backdate_use("a", 2 * HOUR)
    assert await SessionManager(make_provider(), store).evict("a", idle_for=HOUR)
    with pytest.raises(SandboxEvicted):
        await user.acquire("a", SPEC)


@attrs.define
class FlakyDestroy:
    """A provider whose destroy is unavailable until told otherwise."""

    inner: Any
    down: bool = True

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        if self.down:
            raise ProviderUnavailable("the backend is down (injected)")
        await self.inner.destroy(session_key, ref)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_an_unavailable_provider_stops_the_pass_and_the_next_one_finishes(
    store: InMemoryBindingStore, make_provider: Callable[..., Any], world: Any
) -> None:
    """Nothing more is tried once the provider fails; the unfinished eviction is finished later."""
    flaky = FlakyDestroy(make_provider())
    manager = SessionManager(flaky, store)  # type: ignore[arg-type]
    await _sessions(manager, "a", "b")
    await manager.acquire("a", SPEC)
    await manager.acquire("b", SPEC)
    store.backdate_use("a", 3 * HOUR)
    store.backdate_use("b", 2 * HOUR)
    stopped = await manager.evict_idle(HOUR)
    assert not stopped.ok
    assert stopped.stopped is not None
    assert "ProviderUnavailable" in stopped.stopped
    assert (stopped.attempted, stopped.evicted, [s for s, _ in stopped.failures]) == (1, 0, ["a"])
    assert len(world.resources) == 2  # b was not tried
    with pytest.raises(SandboxEvicted, match="is being destroyed") as pending:
        await manager.acquire("a", SPEC)
    assert not pending.value.finished
    assert await store.live_sandboxes() == 2  # an unfinished eviction still holds its place
    flaky.down = False
    finished = await manager.evict_idle(HOUR)
    assert (finished.ok, finished.evicted) == (True, 2)
    assert world.resources == {}
    with pytest.raises(SandboxEvicted, match="was destroyed"):
        await manager.acquire("a", SPEC)


async def test_the_idle_time_must_exceed_the_use_interval(
    store: InMemoryBindingStore, make_provider: Callable[..., Any]
) -> None:
    """Uses are written every 30 s at most, so a shorter idle time could take a busy Session."""
    manager = SessionManager(make_provider(), store)
    for bad in (0, 29.9, float("nan"), float("inf"), True):
        with pytest.raises(InvalidInput, match="idle_for"):
            await manager.evict_idle(bad)


def test_evict_action_setting() -> None:
    """MANGO_EVICT_ACTION: pause by default, destroy on request, a bad value named."""
    from mango.domain import ConfigurationError
    from mango.domain.fleet import EvictAction, fleet_policy

    assert fleet_policy({}).evict_action is EvictAction.PAUSE
    assert fleet_policy({"MANGO_EVICT_ACTION": " Destroy "}).evict_action is EvictAction.DESTROY
    with pytest.raises(
        ConfigurationError, match="MANGO_EVICT_ACTION must be one of pause, destroy"
    ):
        fleet_policy({"MANGO_EVICT_ACTION": "hibernate"})


async def test_the_eviction_pauses_only_where_pause_is_declared(
    make_provider: Callable[..., Any],
) -> None:
    """idle_action is pause only with the capability declared and the action allowing it."""
    from mango.domain import Capability, CapabilitySet
    from mango.domain.fleet import EvictAction

    store = InMemoryBindingStore()
    pausing = CapabilitySet.of(Capability.PAUSE)
    assert SessionManager(make_provider(), store).idle_action == "destroy"
    assert SessionManager(make_provider(), store, pausing).idle_action == "pause"
    destroy = SessionManager(make_provider(), store, pausing, evict_action=EvictAction.DESTROY)
    assert destroy.idle_action == "destroy"
