"""A Hypothesis model of SessionManager: it does what the lifecycle table says, nothing else.

The machine drives SessionManager (several workers over one in-memory store
and one provider world) with acquire, acquire-existing, use, release, delete,
reconcile, pause, resume, idle time passing and the idle eviction (worker 0's
pauses, worker 1's destroys), crashes between steps (also between the pause
mark and the provider's pause, and between the provider's resume and the
mark's removal) and resources vanishing behind mango's back.
Every handler records what it performed and the signal its outcome reported;
the model walks the same command through the table
(:class:`~mango.domain.lifecycle.Course`) with those signals, so the effects
performed must be exactly the table's, in its order, follow-ups included.
The model knows only the world: a resource that vanished is the one thing
that makes an effect report ``lost``. After every step the state observed
from the store's rows must equal the state the walk ended in, and the
resources at the provider must fit it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mango.app import InMemoryBindingStore, ManualClock, SessionManager
from mango.app.session_manager import EffectHandler, Handlers, default_handlers
from mango.domain import (
    Capability,
    CapabilitySet,
    InvalidInput,
    InvalidTransition,
    LifecycleCommand,
    LifecycleEffect,
    LifecycleState,
    ProvisioningIntent,
    SandboxEvicted,
    SandboxNotFound,
    SandboxSpec,
    SessionDeleting,
    spec_hash,
    transition,
)
from mango.domain.fleet import EvictAction
from mango.domain.lifecycle import LIFECYCLE, LifecycleGuard, LifecycleSignal
from mango.domain.ports import Sandbox

S, C, E, L = LifecycleState, LifecycleCommand, LifecycleEffect, LifecycleSignal
SPEC = SandboxSpec()
SESSIONS = ("a", "b")
IDLE_FOR = 3600.0
_T = TypeVar("_T")


@attrs.frozen
class Performed:
    """One effect SessionManager performed, and the signal its outcome reported."""

    effect: str
    signal: LifecycleSignal | None


def recording(log: dict[str, list[Performed]]) -> Handlers:
    """The default handlers, each noting per Session what it performed and reported."""
    handlers = default_handlers()
    for name, handler in handlers.effects.items():

        def gather(facts: Any, handler: EffectHandler[Any] = handler) -> tuple[str, Any]:
            return facts.session_id, handler.gather(facts)

        async def perform(
            ports: Any, given: tuple[str, Any], name: str = name, handler: Any = handler
        ) -> Any:
            session_id, inner = given
            try:
                outcome = await handler.perform(ports, inner)
            except BaseException:
                log[session_id].append(Performed(name, None))  # failed (fail-lost always does)
                raise
            log[session_id].append(Performed(name, outcome.signal))
            return outcome

        handlers = handlers.with_effect(
            name, EffectHandler(gather=gather, perform=perform, outcomes=handler.outcomes)
        )
    return handlers


def follow(
    state: LifecycleState, command: LifecycleCommand, performed: list[Performed]
) -> LifecycleState:
    """Walk ``command`` through the table, taking each signal from what SessionManager reported.

    Every effect the table asks for must have been performed, in the table's
    order, and nothing else; the state the walk ends in is returned.
    """
    course = LIFECYCLE.course(state, command)
    remaining = list(performed)
    while (step := course.next()) is not None:
        effects = step.transition.effects
        done, remaining = remaining[: len(effects)], remaining[len(effects) :]
        assert [p.effect for p in done] == list(effects), (step, performed)
        course.settle(step, done[-1].signal if done else None)
    assert remaining == [], f"performed beyond the table: {remaining}"
    return course.state


class SessionManagerModel(RuleBasedStateMachine):
    """Drive SessionManager and check it against the lifecycle table."""

    def __init__(self, new_world: Callable[[], Any], provider_type: type[Any]) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.world = new_world()
        self.provider_type = provider_type
        self.store = InMemoryBindingStore(ManualClock())
        self.log: dict[str, list[Performed]] = defaultdict(list)
        self.handlers = recording(self.log)
        self.providers = [self._provider() for _ in range(2)]
        self.managers = [self._manager(p, w) for w, p in enumerate(self.providers)]
        # None: no Session row. Otherwise the state the table walked to.
        self.model: dict[str, LifecycleState | None] = dict.fromkeys(SESSIONS)
        self.vanished: dict[str, bool] = dict.fromkeys(SESSIONS, False)
        self.clients: dict[str, Sandbox] = {}
        # True once IDLE_FOR passed since the Session's last recorded use.
        self.idle: dict[str, bool] = dict.fromkeys(SESSIONS, False)

    def _provider(self) -> Any:
        # Keep-alive makes every acquire, cached or not, ask the provider, as
        # remote sandboxes do, so the loss is found on the next acquire.
        return self.provider_type(self.world, keep_alive=True)

    def _manager(self, provider: Any, worker: int) -> SessionManager:
        # Every acquire writes its use, so the model knows exactly what is idle.
        # Worker 0's eviction pauses, worker 1's destroys.
        return SessionManager(
            provider,
            self.store,
            capabilities=CapabilitySet.of(Capability.PAUSE),
            handlers=self.handlers,
            use_interval=0,
            evict_action=EvictAction.PAUSE if worker == 0 else EvictAction.DESTROY,
        )

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        self.log.clear()
        return self.loop.run_until_complete(work)

    def _follow(
        self,
        sid: str,
        state: LifecycleState,
        command: LifecycleCommand,
        *,
        touches: bool = True,
    ) -> LifecycleState:
        """The walk with what SessionManager reported; ``lost`` only if the world says so.

        ``touches``: the command reaches the provider (a resume of a running
        Session does not, so it meets no loss).
        """
        performed = self.log.pop(sid, [])
        if state is S.LOST and performed and performed[0].effect == E.RECORD_USE:
            # A worker's cached client stands for the binding, so a loss
            # another worker recorded is met through its keep-alive.
            state = S.BOUND
        if state is S.EVICTED and performed and performed[0].effect == E.RECORD_USE:
            # A cached client's use meets the eviction mark: observed again.
            performed = performed[1:]
        if any(p.effect in (E.RECORD_USE, E.PUBLISH_BINDING) for p in performed):
            self.idle[sid] = False
        reported_lost = any(p.signal is L.LOST for p in performed)
        meets = touches and state in (S.BOUND, S.PAUSED)
        assert reported_lost == (self.vanished[sid] and meets), (state, performed)
        return follow(state, command, performed)

    def teardown(self) -> None:
        self.loop.close()

    def _creates(self) -> int:
        return sum(p.create_calls for p in self.providers)

    # ------------------------------------------------------------ rules

    @rule(sid=st.sampled_from(SESSIONS), worker=st.integers(0, 1))
    def ensure(self, sid: str, worker: int) -> None:
        """Create the Session row; a fenced Session refuses."""
        if self.model[sid] is S.DELETING:
            try:
                self._run(self.managers[worker].ensure_session(sid))
            except SessionDeleting:
                return
            raise AssertionError("a fenced Session accepted ensure_session")
        self._run(self.managers[worker].ensure_session(sid))
        if self.model[sid] is None:
            self.model[sid] = S.UNBOUND
            self.vanished[sid] = False

    @rule(
        sid=st.sampled_from(SESSIONS),
        worker=st.integers(0, 1),
        command=st.sampled_from([C.ACQUIRE, C.ACQUIRE_EXISTING]),
    )
    def acquire(self, sid: str, worker: int, command: LifecycleCommand) -> None:
        """acquire / acquire_existing perform the table's effects and end where it says."""
        manager = self.managers[worker]
        call = manager.acquire if command is C.ACQUIRE else manager.acquire_existing
        state = self.model[sid]
        if state is None:
            if command is C.ACQUIRE:
                try:
                    self._run(call(sid, SPEC))
                except InvalidInput:
                    return
                raise AssertionError("acquire of an absent Session succeeded")
            assert self._run(call(sid, SPEC)) is None
            return
        if LIFECYCLE.transitions.get((state, command)) is None:
            # The state refuses the command; a fenced one with its own error.
            assert LIFECYCLE.refusal(state) is LifecycleGuard.NOT_DELETING
            try:
                self._run(call(sid, SPEC))
            except SessionDeleting:
                assert not self.log[sid], "a refused command performed an effect"
                return
            raise AssertionError(f"{command} succeeded in state {state}")
        creates = self._creates()
        try:
            sandbox = self._run(call(sid, SPEC))
        except SandboxEvicted:
            assert state is S.EVICTED
            sandbox, failed = None, True
        except SandboxNotFound:
            sandbox, failed = None, True
        else:
            failed = False
        performed = list(self.log[sid])
        expected = self._follow(sid, state, command)
        fails = (E.FAIL_LOST, E.FAIL_EVICTED)
        assert failed == any(p.effect in fails for p in performed), performed
        if not failed:
            assert (sandbox is None) == (expected is not S.BOUND)
            if sandbox is not None:
                self.clients[sid] = sandbox
        if state in (S.BOUND, S.PAUSED, S.LOST, S.EVICTED):
            assert self._creates() == creates, "a bound, lost or evicted Session got a resource"
        if state is S.PAUSED and not failed:
            assert self._ext(sid) not in self.world.paused, "acquire handed out a paused sandbox"
        self.model[sid] = expected

    @rule(sid=st.sampled_from(SESSIONS))
    def use(self, sid: str) -> None:
        """A handed-out client that meets a vanished resource records the loss."""
        client = self.clients.get(sid)
        if client is None:
            return
        try:
            self._run(client.read_file("probe"))
        except SandboxNotFound:
            state = self.model[sid]
            assert self.vanished[sid] or state is S.EVICTED
            if state in (S.BOUND, S.PAUSED, S.LOST, S.EVICTED):
                self.model[sid] = follow(state, C.REFERENCE_LOST, self.log.pop(sid, []))
        except KeyError:
            assert not self.vanished[sid]
        assert not any(self.log.values()), "a use performed lifecycle effects it should not"

    @rule(sid=st.sampled_from(SESSIONS))
    def vanish(self, sid: str) -> None:
        """The bound resource disappears behind mango's back."""
        binding = self._run(self.store.get_binding(sid))
        if binding is None:
            return
        if self.world.resources.pop(binding.ref.external_id, None) is not None:
            self.world.files.pop(binding.ref.external_id, None)
            self.world.paused.discard(binding.ref.external_id)
            self.vanished[sid] = True

    @rule()
    def time_passes(self) -> None:
        """Longer than the idle time passes without a use."""
        self.store.clock.advance(timedelta(seconds=2 * IDLE_FOR))  # type: ignore[attr-defined]
        self.idle = dict.fromkeys(SESSIONS, True)

    @rule(sid=st.sampled_from(SESSIONS), worker=st.integers(0, 1))
    def bind(self, sid: str, worker: int) -> None:
        """Create the Session and acquire its sandbox (both steps above, in one)."""
        self.ensure(sid, worker)
        self.acquire(sid, worker, C.ACQUIRE)

    @precondition(lambda self: S.BOUND in self.model.values())
    @rule(data=st.data(), worker=st.integers(0, 1), idle=st.booleans())
    def evict_bound(self, data: st.DataObject, worker: int, idle: bool) -> None:
        """A bound Session (idle or not) meets the eviction."""
        bound = sorted(sid for sid, state in self.model.items() if state is S.BOUND)
        self.evict(data.draw(st.sampled_from(bound)), worker, idle)

    @rule(sid=st.sampled_from(SESSIONS), worker=st.integers(0, 1), idle=st.booleans())
    def evict(self, sid: str, worker: int, idle: bool) -> None:
        """The eviction takes a bound Session only if it is idle, as the table says."""
        if idle:
            self.time_passes()
        state = self.model[sid]
        creates = self._creates()
        command = C.PAUSE_IDLE if worker == 0 else C.EVICT
        if state is None or LIFECYCLE.transitions.get((state, command)) is None:
            with pytest.raises((InvalidTransition, SessionDeleting)):
                self._run(self.managers[worker].evict(sid, idle_for=IDLE_FOR))
            assert not self.log[sid], "a refused eviction performed an effect"
            return
        evicted = self._run(self.managers[worker].evict(sid, idle_for=IDLE_FOR))
        performed = self.log.pop(sid, [])
        marked = any(p.signal is L.IDLE for p in performed)
        assert marked == (state is S.BOUND and self.idle[sid]), (state, performed)
        reported_lost = any(p.signal is L.LOST for p in performed)
        touches = state is S.PAUSED or (state is S.BOUND and marked and command is C.PAUSE_IDLE)
        assert reported_lost == (self.vanished[sid] and touches), (state, performed)
        self.model[sid] = follow(state, command, performed)
        destroyed = any(p.effect == E.DESTROY_EVICTED for p in performed)
        assert evicted == (marked or destroyed)
        assert self._creates() == creates, "an eviction created a resource"

    def _ext(self, sid: str) -> str | None:
        binding = self._run(self.store.get_binding(sid))
        return None if binding is None else binding.ref.external_id

    @rule(
        sid=st.sampled_from(SESSIONS),
        worker=st.integers(0, 1),
        command=st.sampled_from([C.PAUSE, C.RESUME]),
    )
    def pause_or_resume(self, sid: str, worker: int, command: LifecycleCommand) -> None:
        """pause / resume perform the table's effects; the backend ends as the state says."""
        manager = self.managers[worker]
        call = manager.pause if command is C.PAUSE else manager.resume
        state = self.model[sid]
        if state is None or LIFECYCLE.transitions.get((state, command)) is None:
            with pytest.raises((InvalidTransition, SessionDeleting)):
                self._run(call(sid))
            assert not self.log[sid], "a refused pause or resume performed an effect"
            return
        creates = self._creates()
        try:
            self._run(call(sid))
        except SandboxEvicted:
            assert state is S.EVICTED
        except SandboxNotFound:
            assert state is S.LOST or self.vanished[sid]
        touches = not (state is S.BOUND and command is C.RESUME)
        self.model[sid] = self._follow(sid, state, command, touches=touches)
        assert self._creates() == creates, "a pause or resume created a resource"
        ext = self._ext(sid)
        if self.model[sid] is S.PAUSED:
            assert ext in self.world.paused
        elif self.model[sid] is S.BOUND:
            assert ext not in self.world.paused

    @rule(sid=st.sampled_from(SESSIONS), at_provider=st.booleans())
    def crash_while_pausing(self, sid: str, at_provider: bool) -> None:
        """A worker died after the pause mark (and maybe after the provider paused)."""
        if self.model[sid] is not S.BOUND:
            return
        binding = self._run(self.store.get_binding(sid))
        assert binding is not None
        assert self._run(self.store.mark_paused(sid, binding.ref)) is not None
        if at_provider and binding.ref.external_id in self.world.resources:
            self.world.paused.add(binding.ref.external_id)
        self.model[sid] = S.PAUSED

    @rule(sid=st.sampled_from(SESSIONS))
    def crash_while_resuming(self, sid: str) -> None:
        """A worker died after the provider resumed, before the mark went."""
        if self.model[sid] is not S.PAUSED:
            return
        ext = self._ext(sid)
        self.world.paused.discard(ext or "")

    @rule(sid=st.sampled_from(SESSIONS), after_create=st.booleans())
    def crash_while_provisioning(self, sid: str, after_create: bool) -> None:
        """A worker died after writing the intent (and maybe after creating)."""
        if self.model[sid] is not S.UNBOUND:
            return
        intent = ProvisioningIntent(sid, "memory", SPEC, spec_hash(SPEC))
        self._run(self.store.put_intent(intent))
        if after_create:
            self._run(self._provider().create(sid, SPEC))
        self.model[sid] = transition(S.UNBOUND, C.ACQUIRE).state

    @rule(sid=st.sampled_from(SESSIONS))
    def crash_after_fence(self, sid: str) -> None:
        """A worker died right after fencing, before tearing anything down."""
        state = self.model[sid]
        if state is None:
            return
        self._run(self.store.fence_session(sid))
        self.model[sid] = transition(state, C.DELETE).state
        self.clients.pop(sid, None)

    @rule(sid=st.sampled_from(SESSIONS), worker=st.integers(0, 1), finish=st.booleans())
    def release(self, sid: str, worker: int, finish: bool) -> None:
        """release / delete_session tear down by the table, creating nothing."""
        creates = self._creates()
        manager = self.managers[worker]
        state = self.model[sid]
        if finish:
            deleted = self._run(manager.delete_session(sid))
            assert deleted == (state is not None)
        else:
            self._run(manager.release(sid))
        self._torn_down(sid, state, finished=finish)
        assert self._creates() == creates, "teardown created a resource"
        self.clients.pop(sid, None)
        self.vanished[sid] = False

    def _torn_down(self, sid: str, state: LifecycleState | None, *, finished: bool) -> None:
        """Check the teardown the log shows against the table; update the model."""
        teardown = len(LIFECYCLE.step(S.DELETING, C.DELETE).effects)
        performed = self.log.pop(sid, [])
        # No row at all: the teardown still runs (from unbound), then the
        # second command meets a Session its own release saw deleted.
        fenced = follow(state or S.UNBOUND, C.DELETE, performed[:teardown])
        if finished:
            after = fenced if state is not None else S.DELETED
            assert follow(after, C.DELETION_FINISHED, performed[teardown:]) is S.DELETED
            self.model[sid] = None
        else:
            assert performed[teardown:] == []
            if state is not None:
                self.model[sid] = fenced

    @rule(worker=st.integers(0, 1))
    def reconcile(self, worker: int) -> None:
        """The reconciler finishes live intents and tears down fenced ones, as the table says."""
        report = self._run(self.managers[worker].reconcile_provisioning())
        assert report.ok, report.failures
        for sid, state in self.model.items():
            if state is S.PROVISIONING:
                self.model[sid] = self._follow(sid, state, C.ACQUIRE)
            elif state is S.DELETING and sid in self.log:
                self.model[sid] = follow(state, C.DELETE, self.log.pop(sid))
        assert not any(self.log.values()), f"reconcile touched other Sessions: {self.log}"

    @rule(worker=st.integers(0, 1))
    def finish_deletions(self, worker: int) -> None:
        """Fenced Sessions are torn down and deleted, creating nothing."""
        creates = self._creates()
        report = self._run(self.managers[worker].finish_deletions())
        assert report.ok, report.failures
        assert self._creates() == creates, "finishing deletions created a resource"
        for sid, state in self.model.items():
            if state is S.DELETING:
                self._torn_down(sid, state, finished=True)
                self.clients.pop(sid, None)
                self.vanished[sid] = False
        assert not any(self.log.values()), f"finishing touched other Sessions: {self.log}"

    @rule(worker=st.integers(0, 1))
    def restart(self, worker: int) -> None:
        """A worker restarts: a fresh provider instance and an empty cache."""
        self.providers[worker] = self._provider()
        self.managers[worker] = self._manager(self.providers[worker], worker)

    # ------------------------------------------------------------ invariants

    @invariant()
    def observed_state_is_predicted(self) -> None:
        for sid, state in self.model.items():
            observed = self._run(self.managers[0].observe(sid))
            assert observed is (S.UNBOUND if state is None else state), sid

    @invariant()
    def a_paused_resource_has_a_paused_record(self) -> None:
        for sid, state in self.model.items():
            owned = [ext for ext, owner in self.world.resources.items() if owner == sid]
            if any(ext in self.world.paused for ext in owned):
                assert state in (S.PAUSED, S.DELETING), (sid, state)

    @invariant()
    def resources_fit_the_state(self) -> None:
        for sid, state in self.model.items():
            owned = [ext for ext, owner in self.world.resources.items() if owner == sid]
            assert len(owned) <= 1, f"{sid} has {len(owned)} resources"
            binding = self._run(self.store.get_binding(sid))
            if state in (S.BOUND, S.PAUSED) and not self.vanished[sid]:
                assert binding is not None
                assert owned == [binding.ref.external_id]
            elif state in (S.LOST, S.EVICTED) or self.vanished[sid]:
                assert owned == [], "a lost or evicted Session got a replacement"
            elif state in (None, S.UNBOUND):
                assert owned == []
                assert binding is None


def test_session_manager_follows_the_lifecycle_table(
    new_world: Callable[[], Any], make_provider: Callable[..., Any]
) -> None:
    """SessionManager's observable state always equals the table's prediction."""
    provider_type = type(make_provider())
    run_state_machine_as_test(
        lambda: SessionManagerModel(new_world, provider_type),  # type: ignore[arg-type]
        settings=settings(
            max_examples=150,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
