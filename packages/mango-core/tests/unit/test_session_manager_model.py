"""A Hypothesis model of SessionManager: the store's state always equals what the table predicts.

The machine drives SessionManager (several workers over one in-memory store
and one provider world) with acquire, acquire-existing, use, release, delete,
reconcile, crashes between steps and resources vanishing behind mango's back.
A model Session state advances by :func:`~mango.domain.lifecycle.transition`
alone; after every step the state observed from the store's rows must equal
it, and the resources at the provider must fit it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import (
    InvalidInput,
    InvalidTransition,
    LifecycleCommand,
    LifecycleEffect,
    LifecycleState,
    ProvisioningIntent,
    SandboxNotFound,
    SandboxSpec,
    SessionDeleting,
    spec_hash,
    transition,
)
from mango.domain.ports import Sandbox

S, C, E = LifecycleState, LifecycleCommand, LifecycleEffect
SPEC = SandboxSpec()
SESSIONS = ("a", "b")
_T = TypeVar("_T")


def predict(
    state: LifecycleState, command: LifecycleCommand, *, vanished: bool
) -> tuple[LifecycleState, bool]:
    """The state after ``command`` by the table alone, and whether the caller sees 'lost'.

    ``vanished``: the bound resource is gone at the provider, which attaching
    (or keep-alive) reports as ``reference-lost``.
    """
    pending, failed = [command], False
    while pending:
        current = pending.pop(0)
        step = transition(state, current)
        if E.ATTACH_RESOURCE in step.effects and vanished:
            pending[:0] = [C.REFERENCE_LOST, current]
        elif E.SETUP_RESOURCE in step.effects:
            pending.insert(0, C.RESOURCE_READY)
        failed = failed or E.FAIL_LOST in step.effects
        state = step.state
    return state, failed


class SessionManagerModel(RuleBasedStateMachine):
    """Drive SessionManager and check it against the lifecycle table."""

    def __init__(self, new_world: Callable[[], Any], provider_type: type[Any]) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.world = new_world()
        self.provider_type = provider_type
        self.store = InMemoryBindingStore()
        self.providers = [self._provider() for _ in range(2)]
        self.managers = [SessionManager(p, self.store) for p in self.providers]
        # None: no Session row. Otherwise the state the table predicts.
        self.model: dict[str, LifecycleState | None] = dict.fromkeys(SESSIONS)
        self.vanished: dict[str, bool] = dict.fromkeys(SESSIONS, False)
        self.clients: dict[str, Sandbox] = {}

    def _provider(self) -> Any:
        # Keep-alive makes every acquire, cached or not, ask the provider, as
        # remote sandboxes do, so the loss is found on the next acquire.
        return self.provider_type(self.world, keep_alive=True)

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(work)

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
        """acquire / acquire_existing end where the table says, or fail as it says."""
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
        try:
            expected, lost = predict(state, command, vanished=self.vanished[sid])
        except InvalidTransition:
            try:
                self._run(call(sid, SPEC))
            except SessionDeleting:
                return
            raise AssertionError(f"{command} succeeded in state {state}") from None
        creates = self._creates()
        try:
            sandbox = self._run(call(sid, SPEC))
        except SandboxNotFound:
            assert lost, f"{command} in {state} failed as lost"
        else:
            assert not lost, f"{command} in {state} handed out a sandbox for a lost resource"
            assert (sandbox is None) == (expected is not S.BOUND)
            if sandbox is not None:
                self.clients[sid] = sandbox
        if state in (S.BOUND, S.LOST):
            assert self._creates() == creates, "a bound or lost Session got a new resource"
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
            assert self.vanished[sid]
            state = self.model[sid]
            if state in (S.BOUND, S.LOST):
                self.model[sid] = transition(state, C.REFERENCE_LOST).state
        except KeyError:
            assert not self.vanished[sid]

    @rule(sid=st.sampled_from(SESSIONS))
    def vanish(self, sid: str) -> None:
        """The bound resource disappears behind mango's back."""
        binding = self._run(self.store.get_binding(sid))
        if binding is None:
            return
        if self.world.resources.pop(binding.ref.external_id, None) is not None:
            self.world.files.pop(binding.ref.external_id, None)
            self.vanished[sid] = True

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
        """release / delete_session tear down without creating anything."""
        creates = self._creates()
        manager = self.managers[worker]
        state = self.model[sid]
        if finish:
            deleted = self._run(manager.delete_session(sid))
            assert deleted == (state is not None)
            if state is not None:
                self.model[sid] = None
        else:
            self._run(manager.release(sid))
            if state is not None:
                self.model[sid] = transition(state, C.DELETE).state
        assert self._creates() == creates, "teardown created a resource"
        self.clients.pop(sid, None)
        self.vanished[sid] = False

    @rule(worker=st.integers(0, 1))
    def reconcile(self, worker: int) -> None:
        """The reconciler finishes live intents and tears down fenced ones."""
        report = self._run(self.managers[worker].reconcile_provisioning())
        assert report.ok, report.failures
        for sid, state in self.model.items():
            if state is S.PROVISIONING:
                self.model[sid], _ = predict(state, C.ACQUIRE, vanished=False)

    @rule(worker=st.integers(0, 1))
    def finish_deletions(self, worker: int) -> None:
        """Fenced Sessions are torn down and deleted, creating nothing."""
        creates = self._creates()
        report = self._run(self.managers[worker].finish_deletions())
        assert report.ok, report.failures
        assert self._creates() == creates, "finishing deletions created a resource"
        for sid, state in self.model.items():
            if state is S.DELETING:
                self.model[sid] = None
                self.clients.pop(sid, None)
                self.vanished[sid] = False

    @rule(worker=st.integers(0, 1))
    def restart(self, worker: int) -> None:
        """A worker restarts: a fresh provider instance and an empty cache."""
        self.providers[worker] = self._provider()
        self.managers[worker] = SessionManager(self.providers[worker], self.store)

    # ------------------------------------------------------------ invariants

    @invariant()
    def observed_state_is_predicted(self) -> None:
        for sid, state in self.model.items():
            observed = self._run(self.managers[0].observe(sid))
            assert observed is (S.UNBOUND if state is None else state), sid

    @invariant()
    def resources_fit_the_state(self) -> None:
        for sid, state in self.model.items():
            owned = [ext for ext, owner in self.world.resources.items() if owner == sid]
            assert len(owned) <= 1, f"{sid} has {len(owned)} resources"
            binding = self._run(self.store.get_binding(sid))
            if state is S.BOUND and not self.vanished[sid]:
                assert binding is not None
                assert owned == [binding.ref.external_id]
            elif state is S.LOST or self.vanished[sid]:
                assert owned == [], "a lost Session got a replacement"
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
