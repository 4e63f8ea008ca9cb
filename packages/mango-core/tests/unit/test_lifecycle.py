"""The lifecycle state machine, tested on its own with Hypothesis."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mango.domain import (
    InvalidTransition,
    LifecycleCommand,
    LifecycleEffect,
    LifecycleState,
    is_permanent,
    observe,
    transition,
)
from mango.domain.errors import LifecycleTableError
from mango.domain.lifecycle import (
    LIFECYCLE,
    FollowUp,
    LifecycleGuard,
    LifecycleSignal,
    LifecycleTable,
    Transition,
)

S, C, E = LifecycleState, LifecycleCommand, LifecycleEffect


class LifecycleMachine(RuleBasedStateMachine):
    """Drive the pure machine with arbitrary commands and check its promises."""

    def __init__(self) -> None:
        super().__init__()
        self.state = S.UNBOUND
        self.history: list[LifecycleState] = [self.state]
        self.intent_persisted = False
        self.resource_created = False

    @rule(command=st.sampled_from(list(LifecycleCommand)))
    def apply(self, command: LifecycleCommand) -> None:
        before = self.state
        try:
            result = transition(before, command)
        except InvalidTransition as exc:
            assert is_permanent(exc)
            assert exc.state == before.value
            return
        if E.PERSIST_INTENT in result.effects:
            self.intent_persisted = True
        if E.CREATE_RESOURCE in result.effects:
            # A resource is only ever created after an intent made the attempt durable
            # and took its place under the fleet limit, right before.
            assert self.intent_persisted
            at = result.effects.index(E.CREATE_RESOURCE)
            assert result.effects[at - 1] is E.RESERVE_SLOT
            self.resource_created = True
        if result.state is S.BOUND and before not in (S.BOUND, S.PAUSED):
            assert before is S.PROVISIONING
            assert result.effects == (E.PUBLISH_BINDING,)
            assert self.resource_created
        if E.DESTROY_RESOURCE in result.effects:
            assert result.effects[0] is E.FENCE_SESSION
        if before is S.LOST and command in (C.ACQUIRE, C.ACQUIRE_EXISTING):
            assert result.effects == (E.FAIL_LOST,)
        if result.state is S.LOST and before is not S.LOST:
            # Entering lost persists it, so every worker sees the same state.
            assert result.effects == (E.RECORD_LOST,)
        if before is S.EVICTED and command in (C.ACQUIRE, C.ACQUIRE_EXISTING):
            assert result.effects == (E.FAIL_EVICTED,)
        if E.ATTACH_RESOURCE in result.effects:
            # A bound Session's use is written before it is handed out.
            assert result.effects == (E.RECORD_USE, E.ATTACH_RESOURCE)
        if result.state is S.EVICTED and before is not S.EVICTED:
            # Only a binding the mark took (it was unused) loses its resource.
            assert (before, command) == (S.BOUND, C.EVICTION_MARKED)
            assert result.effects == (E.DESTROY_EVICTED,)
        self._check_pause(before, command, result.state, result.effects)
        self.state = result.state
        self.history.append(self.state)

    @staticmethod
    def _check_pause(
        before: LifecycleState,
        command: LifecycleCommand,
        after: LifecycleState,
        effects: tuple[str, ...],
    ) -> None:
        if after is S.PAUSED and before is not S.PAUSED:
            # The record says paused before the provider pauses anything.
            assert (before, command) in ((S.BOUND, C.PAUSE), (S.BOUND, C.PAUSE_MARKED))
            assert effects[-1] is E.PAUSE_RESOURCE
            if command is C.PAUSE:
                assert effects == (E.MARK_PAUSED, E.PAUSE_RESOURCE)
        if before is S.PAUSED and after is S.BOUND:
            # The mark goes only after the provider resumed the resource.
            assert (command, effects) == (C.RESOURCE_RESUMED, (E.CLEAR_PAUSED,))
        if before is S.PAUSED and command in (C.ACQUIRE, C.ACQUIRE_EXISTING, C.MATERIALIZE):
            # A paused sandbox is resumed before any use.
            assert effects == (E.RESUME_RESOURCE,)
        if before is S.PAUSED:
            assert E.ATTACH_RESOURCE not in effects
            assert E.DESTROY_EVICTED not in effects

    @invariant()
    def deleted_is_absorbing(self) -> None:
        if S.DELETED in self.history:
            first = self.history.index(S.DELETED)
            assert set(self.history[first:]) == {S.DELETED}

    @invariant()
    def deleting_only_leads_to_deleted(self) -> None:
        for before, after in zip(self.history, self.history[1:], strict=False):
            if before is S.DELETING:
                assert after in (S.DELETING, S.DELETED)


TestLifecycleMachine = LifecycleMachine.TestCase


@given(st.sampled_from(list(LifecycleState)))
def test_delete_is_always_accepted(state: LifecycleState) -> None:
    """Deletion can start (or repeat) from every state; it never fails as a transition."""
    assert transition(state, C.DELETE).state in (S.DELETING, S.DELETED)


@pytest.mark.parametrize(
    ("state", "command"),
    [(S.DELETING, C.ACQUIRE), (S.DELETED, C.ACQUIRE), (S.UNBOUND, C.RESOURCE_READY)],
)
def test_refused_transitions(state: LifecycleState, command: LifecycleCommand) -> None:
    """A fenced or deleted Session admits no acquire; readiness needs provisioning."""
    with pytest.raises(InvalidTransition):
        transition(state, command)


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_observe_is_consistent(
    exists: bool, fenced: bool, intent: bool, binding: bool, lost: bool
) -> None:
    """The observed state accepts deletion and, unless fenced, acquisition."""
    state = observe(
        session_exists=exists,
        fenced=fenced,
        has_intent=intent,
        has_binding=binding,
        binding_lost=binding and lost,
    )
    transition(state, C.DELETE)
    if exists and not fenced:
        transition(state, C.ACQUIRE)
        assert (state in (S.BOUND, S.LOST)) == binding
        assert (state is S.LOST) == (binding and lost)
        if state is S.LOST:
            # A persisted loss fails every acquire and never provisions.
            assert transition(state, C.ACQUIRE).effects == (E.FAIL_LOST,)


@given(st.booleans(), st.booleans())
def test_an_evicted_binding_is_observed_evicted(fenced: bool, lost: bool) -> None:
    """The eviction mark wins over a loss mark; the fence wins over both."""
    state = observe(
        session_exists=True,
        fenced=fenced,
        has_intent=False,
        has_binding=True,
        binding_lost=lost,
        binding_evicted=True,
    )
    assert state is (S.DELETING if fenced else S.EVICTED)
    transition(state, C.DELETE)
    if not fenced:
        # Acquiring again fails with what happened; it never provisions.
        assert transition(state, C.ACQUIRE).effects == (E.FAIL_EVICTED,)


def test_the_eviction_marks_before_it_destroys() -> None:
    """An unused binding is marked (idle), then destroyed; a used one stays bound."""
    course = LIFECYCLE.course(S.BOUND, C.EVICT)
    step = course.next()
    assert step is not None
    assert step.transition.effects == (E.MARK_EVICTED,)
    assert step.transition.guards == (LifecycleGuard.OWNED_HERE,)
    course.settle(step, None)  # used since it was listed: nothing follows
    assert (course.next(), course.state) == (None, S.BOUND)
    course = LIFECYCLE.course(S.BOUND, C.EVICT)
    step = course.next()
    assert step is not None
    course.settle(step, LifecycleSignal.IDLE)
    follow = course.next()
    assert follow is not None
    assert follow.transition.effects == (E.DESTROY_EVICTED,)
    course.settle(follow, None)
    assert (course.next(), course.state) == (None, S.EVICTED)


# ------------------------------------------------------------------ the table and its rules

G, L = LifecycleGuard, LifecycleSignal
ATTACHED_THEN_LOST = FollowUp(L.LOST, (C.REFERENCE_LOST, C.ACQUIRE))


def _with(row: Transition, *, key: tuple[LifecycleState, LifecycleCommand] = (S.BOUND, C.ACQUIRE)):
    return LIFECYCLE.with_transitions({key: row})


def test_the_default_table_is_built_and_checked_at_import() -> None:
    """``transition`` answers from LIFECYCLE, a LifecycleTable (checked when it was built)."""
    assert isinstance(LIFECYCLE, LifecycleTable)
    for (state, command), row in LIFECYCLE.transitions.items():
        assert transition(state, command) is row
    assert LIFECYCLE.effects == set(LifecycleEffect)
    assert LIFECYCLE.guards == set(LifecycleGuard)


def test_an_emitting_effect_that_is_not_last_is_refused() -> None:
    """An effect that may report a signal must end its transition."""
    row = Transition(S.BOUND, (E.ATTACH_RESOURCE, E.RECORD_LOST), follow_ups=(ATTACHED_THEN_LOST,))
    with pytest.raises(LifecycleTableError, match="must be the last") as info:
        _with(row)
    assert is_permanent(info.value)
    assert any("(bound, acquire)" in reason for reason in info.value.reasons)


def test_a_signal_without_a_follow_up_is_refused() -> None:
    """Every signal the last effect may report needs a declared follow-up."""
    with pytest.raises(LifecycleTableError, match="declares no follow-up for it"):
        _with(Transition(S.BOUND, (E.ATTACH_RESOURCE,)))


def test_a_follow_up_no_effect_reports_is_refused() -> None:
    """A follow-up on a signal the last effect never reports is dead: refused."""
    row = Transition(S.BOUND, (E.RECORD_LOST,), follow_ups=(ATTACHED_THEN_LOST,))
    with pytest.raises(LifecycleTableError, match="never reports"):
        _with(row)


def test_a_follow_up_the_next_state_refuses_is_refused() -> None:
    """Each follow-up command must be admitted by the state it meets."""
    row = Transition(
        S.BOUND,
        (E.ATTACH_RESOURCE,),
        follow_ups=(FollowUp(L.LOST, (C.RESOURCE_READY,)),),
    )
    with pytest.raises(LifecycleTableError, match="follow-up resource-ready meets bound"):
        _with(row)


def test_follow_ups_that_loop_are_refused() -> None:
    """A follow-up chain that comes back to where it started would never end."""
    row = Transition(S.BOUND, (E.ATTACH_RESOURCE,), follow_ups=(FollowUp(L.LOST, (C.ACQUIRE,)),))
    with pytest.raises(LifecycleTableError, match="loop"):
        _with(row)


def test_every_broken_rule_is_listed() -> None:
    """One error lists every fault of the table, not just the first."""
    rows = {
        (S.BOUND, C.ACQUIRE): Transition(S.BOUND, (E.ATTACH_RESOURCE,)),
        (S.PROVISIONING, C.ACQUIRE): Transition(
            S.PROVISIONING, (E.SETUP_RESOURCE, E.CREATE_RESOURCE)
        ),
    }
    with pytest.raises(LifecycleTableError) as info:
        LIFECYCLE.with_transitions(rows)
    assert [reason.split(":")[0] for reason in info.value.reasons] == [
        "(provisioning, acquire)",
        "(bound, acquire)",
    ]


def test_a_broken_table_fails_when_its_module_is_imported(tmp_path: Path) -> None:
    """A module that builds a broken table cannot be imported at all."""
    module = tmp_path / "broken_lifecycle_table.py"
    module.write_text(
        "from mango.domain.lifecycle import LIFECYCLE, LifecycleCommand, LifecycleEffect,"
        " LifecycleState, Transition\n"
        "TABLE = LIFECYCLE.with_transitions({(LifecycleState.BOUND, LifecycleCommand.ACQUIRE):"
        " Transition(LifecycleState.BOUND, (LifecycleEffect.ATTACH_RESOURCE,"
        " LifecycleEffect.RECORD_LOST))})\n"
    )
    spec = importlib.util.spec_from_file_location("broken_lifecycle_table", module)
    assert spec is not None
    assert spec.loader is not None
    with pytest.raises(LifecycleTableError, match="must be the last"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_copy_with_a_new_effect_keeps_the_original() -> None:
    """with_transitions returns a checked copy; the default table is unchanged."""
    flush = "flush-memory"
    teardown = (E.FENCE_SESSION, flush, E.DESTROY_RESOURCE, E.REMOVE_BINDING, E.REMOVE_INTENT)
    copy = LIFECYCLE.with_transitions(
        {(S.BOUND, C.DELETE): Transition(S.DELETING, teardown, guards=(G.OWNED_HERE,))}
    )
    assert flush in copy.effects
    assert flush not in LIFECYCLE.effects
    assert copy.step(S.BOUND, C.DELETE).effects[1] == flush
    assert copy.refusal(S.DELETING) is G.NOT_DELETING


@pytest.mark.parametrize(
    ("start", "command", "signals", "path", "end"),
    [
        # First use: set up, then published.
        (
            S.UNBOUND,
            C.ACQUIRE,
            [L.READY, None],
            [(S.UNBOUND, C.ACQUIRE), (S.PROVISIONING, C.RESOURCE_READY)],
            S.BOUND,
        ),
        # Outbid: the winner's binding is attached.
        (
            S.PROVISIONING,
            C.RESOURCE_READY,
            [L.OUTBID, None],
            [(S.PROVISIONING, C.RESOURCE_READY), (S.BOUND, C.ACQUIRE)],
            S.BOUND,
        ),
        # A vanished resource: the loss is recorded, then the command meets lost.
        (
            S.BOUND,
            C.ACQUIRE_EXISTING,
            [L.LOST, None, None],
            [
                (S.BOUND, C.ACQUIRE_EXISTING),
                (S.BOUND, C.REFERENCE_LOST),
                (S.LOST, C.ACQUIRE_EXISTING),
            ],
            S.LOST,
        ),
    ],
)
def test_a_course_runs_the_declared_follow_ups_first(
    start: LifecycleState,
    command: LifecycleCommand,
    signals: list[LifecycleSignal | None],
    path: list[tuple[LifecycleState, LifecycleCommand]],
    end: LifecycleState,
) -> None:
    """Each signal queues the transition's follow-ups, in order, before anything else."""
    course = LIFECYCLE.course(start, command)
    walked = []
    for signal in signals:
        step = course.next()
        assert step is not None
        walked.append((course.state, step.command))
        course.settle(step, signal)
    assert course.next() is None
    assert walked == path
    assert course.state is end


def test_a_course_refuses_what_the_state_does_not_admit() -> None:
    """The course raises InvalidTransition; the table names the refusal guard of the state."""
    course = LIFECYCLE.course(S.DELETING, C.ACQUIRE)
    with pytest.raises(InvalidTransition):
        course.next()
    assert LIFECYCLE.refusal(S.DELETING) is G.NOT_DELETING
    assert LIFECYCLE.refusal(S.BOUND) is None


@pytest.mark.parametrize(
    ("lost", "evicted", "expected"),
    [(False, False, S.PAUSED), (True, False, S.LOST), (False, True, S.EVICTED)],
)
def test_a_paused_binding_is_observed_paused_unless_lost_or_evicted(
    lost: bool, evicted: bool, expected: LifecycleState
) -> None:
    """The pause mark yields paused; the loss and the eviction win over it."""
    state = observe(
        session_exists=True,
        fenced=False,
        has_intent=False,
        has_binding=True,
        binding_lost=lost,
        binding_evicted=evicted,
        binding_paused=True,
    )
    assert state is expected
