"""The per-Session sandbox lifecycle as a pure state machine.

::

    unbound --acquire--> provisioning --resource_ready--> bound
       |                     |   ^ (acquire: resume)        |  \\
       |                     |   |                          |   reference_lost --> lost
       +----- delete --------+---+---------- delete --------+------ delete -------+
                                  v
                               deleting --deletion_finished--> deleted

:func:`transition` maps ``(state, command)`` to a :class:`Transition`: the
next state and the ordered effects the application layer must perform through
its ports. It does no I/O. An invalid pair raises :class:`InvalidTransition`.
:func:`observe` derives the durable state from what the store holds.
"""

from __future__ import annotations

import enum

import attrs

from mango.domain.errors import InvalidTransition

__all__ = [
    "LifecycleCommand",
    "LifecycleEffect",
    "LifecycleState",
    "Transition",
    "observe",
    "transition",
]


class LifecycleState(enum.StrEnum):
    """Where a Session's sandbox stands."""

    UNBOUND = "unbound"
    PROVISIONING = "provisioning"
    BOUND = "bound"
    LOST = "lost"
    DELETING = "deleting"
    DELETED = "deleted"


class LifecycleCommand(enum.StrEnum):
    """What happened, or what a caller asks for."""

    ACQUIRE = "acquire"
    ACQUIRE_EXISTING = "acquire-existing"
    RESOURCE_READY = "resource-ready"
    REFERENCE_LOST = "reference-lost"
    DELETE = "delete"
    DELETION_FINISHED = "deletion-finished"


class LifecycleEffect(enum.StrEnum):
    """Work the application layer performs, in the order given."""

    PERSIST_INTENT = "persist-intent"
    CREATE_RESOURCE = "create-resource"
    SETUP_RESOURCE = "setup-resource"
    PUBLISH_BINDING = "publish-binding"
    ATTACH_RESOURCE = "attach-resource"
    RECORD_LOST = "record-lost"
    FAIL_LOST = "fail-lost"
    FENCE_SESSION = "fence-session"
    DESTROY_RESOURCE = "destroy-resource"
    REMOVE_BINDING = "remove-binding"
    REMOVE_INTENT = "remove-intent"
    DELETE_SESSION = "delete-session"


@attrs.frozen
class Transition:
    """The outcome of one command: the next state and the effects to perform."""

    state: LifecycleState
    effects: tuple[LifecycleEffect, ...] = ()


S = LifecycleState
C = LifecycleCommand
E = LifecycleEffect

_TEARDOWN = (E.FENCE_SESSION, E.DESTROY_RESOURCE, E.REMOVE_BINDING, E.REMOVE_INTENT)

_TABLE: dict[tuple[LifecycleState, LifecycleCommand], Transition] = {
    (S.UNBOUND, C.ACQUIRE): Transition(
        S.PROVISIONING, (E.PERSIST_INTENT, E.CREATE_RESOURCE, E.SETUP_RESOURCE)
    ),
    # A retry (or the reconciler) resumes: create is idempotent by session key.
    (S.PROVISIONING, C.ACQUIRE): Transition(S.PROVISIONING, (E.CREATE_RESOURCE, E.SETUP_RESOURCE)),
    (S.PROVISIONING, C.RESOURCE_READY): Transition(S.BOUND, (E.PUBLISH_BINDING,)),
    (S.BOUND, C.ACQUIRE): Transition(S.BOUND, (E.ATTACH_RESOURCE,)),
    (S.BOUND, C.ACQUIRE_EXISTING): Transition(S.BOUND, (E.ATTACH_RESOURCE,)),
    (S.UNBOUND, C.ACQUIRE_EXISTING): Transition(S.UNBOUND, ()),
    (S.PROVISIONING, C.ACQUIRE_EXISTING): Transition(S.PROVISIONING, ()),
    # The loss is persisted, so every worker (and ``mango sessions list``) sees it.
    (S.BOUND, C.REFERENCE_LOST): Transition(S.LOST, (E.RECORD_LOST,)),
    # Lost is explicit: acquiring again fails instead of creating an empty sandbox.
    (S.LOST, C.ACQUIRE): Transition(S.LOST, (E.FAIL_LOST,)),
    (S.LOST, C.ACQUIRE_EXISTING): Transition(S.LOST, (E.FAIL_LOST,)),
    (S.LOST, C.REFERENCE_LOST): Transition(S.LOST, ()),
    (S.UNBOUND, C.DELETE): Transition(S.DELETING, _TEARDOWN),
    (S.PROVISIONING, C.DELETE): Transition(S.DELETING, _TEARDOWN),
    (S.BOUND, C.DELETE): Transition(S.DELETING, _TEARDOWN),
    (S.LOST, C.DELETE): Transition(S.DELETING, _TEARDOWN),
    # Deleting again repeats the idempotent teardown so a failed attempt can finish.
    (S.DELETING, C.DELETE): Transition(S.DELETING, _TEARDOWN),
    (S.DELETING, C.DELETION_FINISHED): Transition(S.DELETED, (E.DELETE_SESSION,)),
    (S.DELETED, C.DELETE): Transition(S.DELETED, ()),
    (S.DELETED, C.DELETION_FINISHED): Transition(S.DELETED, ()),
}


def transition(state: LifecycleState, command: LifecycleCommand) -> Transition:
    """Return the next state and effects, or raise :class:`InvalidTransition`."""
    try:
        return _TABLE[(state, command)]
    except KeyError:
        raise InvalidTransition(state.value, command.value) from None


def observe(
    *,
    session_exists: bool,
    fenced: bool,
    has_intent: bool,
    has_binding: bool,
    binding_lost: bool = False,
) -> LifecycleState:
    """Derive the durable state from the store's rows.

    ``binding_lost`` is the binding's persisted loss mark: it is set when the
    provider reported the bound resource gone (attach, keep-alive or any
    operation of a cached client), so ``lost`` survives restarts.
    """
    if not session_exists:
        return S.DELETED if fenced else S.UNBOUND
    if fenced:
        return S.DELETING
    if has_binding:
        return S.LOST if binding_lost else S.BOUND
    if has_intent:
        return S.PROVISIONING
    return S.UNBOUND
