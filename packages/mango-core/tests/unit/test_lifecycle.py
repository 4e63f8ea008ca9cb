"""The lifecycle state machine, tested on its own with Hypothesis."""

from __future__ import annotations

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
            # A resource is only ever created after an intent made the attempt durable.
            assert self.intent_persisted
            self.resource_created = True
        if result.state is S.BOUND and before is not S.BOUND:
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
        self.state = result.state
        self.history.append(self.state)

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
