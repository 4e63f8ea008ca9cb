"""The per-Session sandbox lifecycle as data: one table, checked when it is built.

::

    unbound --acquire--> provisioning --resource_ready--> bound
       |                     |   ^ (acquire: resume)        |  \\ \\ \\
       |                     |   |                          |   \\ \\ pause ----> paused
       |                     |   |                          |    \\ \\  <-- resume --'
       |                     |   |                          |     \\ reference_lost --> lost
       |                     |   |                          |      evict (idle) ----> evicted
       +----- delete --------+---+---------- delete --------+---- delete (any state) -+
                                  v
                               deleting --deletion_finished--> deleted

The resource steps are rows too: on a bound Session ``materialize`` (before
a tool step) makes the Session's pinned skills present and intact
(``materialize-skills``) and then brings the sandbox's File Resources in line
with the Session's rows (``materialize-resources``), and ``publish-outputs``
publishes its outputs directory, each reporting a vanished sandbox as
``lost`` like attach does (the skills step leaves a vanished sandbox to the
File Resource step after it, which attaches again and reports it: only a
last effect may report a signal); without a bound sandbox ``materialize``
only finishes removals in the rows and ``publish-outputs`` does nothing
(neither ever creates a sandbox); ``deletion-finished`` removes the Session's
skill pins, resource rows and output files before its row.

A :class:`LifecycleTable` maps ``(state, command)`` to a :class:`Transition`,
and the transition is the whole rule for that step:

* ``state``: where the Session stands afterwards;
* ``guards``: named checks, in order, made before any effect; each raises a
  typed error (``owned-here`` refuses another provider's Session before the
  deletion fence is set, ``packages-proven`` a changed package plan, ...);
* ``effects``: the work, in order, that the application layer performs
  through its ports;
* ``follow_ups``: the commands that run next when the *last* effect reports a
  :class:`LifecycleSignal` (setup reports ``ready``, so ``resource-ready``
  follows; attach reports ``lost``, so ``reference-lost`` and then the
  original command follow, which meets the ``lost`` state and fails).

Fleet operation is rows too: a first acquire (and a resumed one) reserves
its place under ``MANGO_MAX_SANDBOXES`` (``reserve-slot``) before anything
is created, an acquire of a bound Session records its use (``record-use``,
written coarsely), and the idle eviction is the ``evict`` command: the
binding is marked evicted only if it is still unused (``mark-evicted``
reports ``idle``), then its resource is destroyed and the next acquire
fails with what happened (``fail-evicted``) instead of reporting a loss.
Where the provider declares ``pause`` and the deployment lets the eviction
pause (``MANGO_EVICT_ACTION``), the idle eviction is ``pause-idle`` instead:
the same compare-and-set marks the binding paused (``mark-paused-idle``
reports ``idle``), then the resource pauses.

Pause is rows too. ``pause`` marks the binding paused *before* the provider
pauses the resource (``mark-paused``, ``pause-resource``), and ``resume``
resumes the resource *before* the mark goes (``resume-resource`` reports
``resumed``, then ``resource-resumed`` clears it), so whenever the resource
may be paused the record says ``paused``: a crash between the two steps
leaves a paused record over a running resource, which the next use resumes
(idempotent) and the next eviction pass pauses again (``pause-resource``
records when the provider confirmed). Every use of a paused Session
(acquire, a resource step) resumes it first; a delete destroys it as it is.

The table also declares which signals each effect may report and what a
state answers to a command it does not admit (``refusals``: a fenced Session
meets the ``not-deleting`` guard's ``SessionDeleting``, not a bare
``InvalidTransition``).

Effects report what they found; only the table turns that into commands, so
its reader sees every path. The rules, checked when a table is built (the
default :data:`LIFECYCLE` at import; :class:`~mango.domain.errors.LifecycleTableError`
lists every broken one): an effect that may report a signal is the last of
its transition (nothing after it can be skipped), every signal it may report
has a follow-up and every follow-up can happen, each follow-up command is
admitted by the state it meets, and follow-ups never loop.

Effects and guards are names, performed by handlers the application layer
looks up in a registry it checks against the table; the default table uses
:class:`LifecycleEffect` and :class:`LifecycleGuard` (string enums). A copy
made with :meth:`LifecycleTable.with_transitions` may add its own (a
resource step before a tool step, a memory write-back before the destroy)
and the interpreter runs it unchanged.

:func:`transition` and :func:`observe` are the pure API (a step of
:data:`LIFECYCLE`; the state the store's rows mean). A :class:`Course` walks
one command and its follow-ups through a table for a caller that performs
the steps (the interpreter, the model tests). Nothing here does I/O.

The machinery (the types, the checks, the course) is in
:mod:`mango.domain.lifecycle_table`; this module holds the default rows and
re-exports it.
"""

from __future__ import annotations

from mango.domain.lifecycle_table import (
    Course,
    FollowUp,
    LifecycleCommand,
    LifecycleEffect,
    LifecycleGuard,
    LifecycleSignal,
    LifecycleState,
    LifecycleTable,
    Step,
    Transition,
)

__all__ = [
    "LIFECYCLE",
    "Course",
    "FollowUp",
    "LifecycleCommand",
    "LifecycleEffect",
    "LifecycleGuard",
    "LifecycleSignal",
    "LifecycleState",
    "LifecycleTable",
    "Step",
    "Transition",
    "observe",
    "transition",
]

S = LifecycleState
C = LifecycleCommand
E = LifecycleEffect
G = LifecycleGuard
L = LifecycleSignal

# Deletion is refused before the fence if another provider holds the Session:
# a command run with the wrong provider selected leaves the Session as it was.
_DELETE = Transition(
    S.DELETING,
    (E.FENCE_SESSION, E.DESTROY_RESOURCE, E.REMOVE_BINDING, E.REMOVE_INTENT),
    guards=(G.OWNED_HERE,),
)


def _attach(command: LifecycleCommand) -> Transition:
    # The use is recorded first (coarsely: at most one write per Session and
    # interval), so the idle eviction never takes a binding in use; a
    # vanished resource is recorded, then the command meets the lost state.
    return Transition(
        S.BOUND,
        (E.RECORD_USE, E.ATTACH_RESOURCE),
        guards=(G.PACKAGES_PROVEN, G.OWNED_HERE),
        follow_ups=(FollowUp(L.LOST, (C.REFERENCE_LOST, command)),),
    )


_READY = (FollowUp(L.READY, (C.RESOURCE_READY,)),)


def _resume_then(command: LifecycleCommand) -> Transition:
    # A paused sandbox is resumed before any use, then the command meets
    # bound; a vanished one is recorded, then the command meets lost.
    return Transition(
        S.PAUSED,
        (E.RESUME_RESOURCE,),
        guards=(G.PACKAGES_PROVEN, G.OWNED_HERE),
        follow_ups=(
            FollowUp(L.RESUMED, (C.RESOURCE_RESUMED, command)),
            FollowUp(L.LOST, (C.REFERENCE_LOST, command)),
        ),
    )


def _pause(*after: LifecycleCommand) -> Transition:
    # The provider pauses the marked resource (again, after a crash: idempotent).
    return Transition(
        S.PAUSED,
        (E.PAUSE_RESOURCE,),
        guards=(G.OWNED_HERE,),
        follow_ups=(FollowUp(L.LOST, (C.REFERENCE_LOST, *after)),),
    )


def _on_bound(command: LifecycleCommand, *effects: LifecycleEffect) -> Transition:
    # A resource step works on the bound sandbox (the cached client, else an
    # attach); a vanished one is recorded, then the command meets lost.
    return Transition(
        S.BOUND,
        effects,
        guards=(G.PACKAGES_PROVEN, G.OWNED_HERE),
        follow_ups=(FollowUp(L.LOST, (C.REFERENCE_LOST, command)),),
    )


# Without a bound sandbox nothing holds a resource: removals are finished in
# the rows alone, and nothing is materialized or published (neither step ever
# creates a sandbox).
_NO_SANDBOX_MATERIALIZE = {
    (state, C.MATERIALIZE): Transition(state, (E.FINISH_REMOVALS,))
    for state in (S.UNBOUND, S.PROVISIONING, S.LOST, S.EVICTED)
}

LIFECYCLE = LifecycleTable(
    {
        # The intent takes its place under the fleet limit before anything is
        # created; a full fleet refuses (FleetFull) and the intent is removed.
        (S.UNBOUND, C.ACQUIRE): Transition(
            S.PROVISIONING,
            (E.PERSIST_INTENT, E.RESERVE_SLOT, E.CREATE_RESOURCE, E.SETUP_RESOURCE),
            follow_ups=_READY,
        ),
        # A retry (or the reconciler) resumes: create is idempotent by session
        # key, and the intent's provider and spec win over the caller's; an
        # intent that holds its place keeps it.
        (S.PROVISIONING, C.ACQUIRE): Transition(
            S.PROVISIONING,
            (E.RESERVE_SLOT, E.CREATE_RESOURCE, E.SETUP_RESOURCE),
            guards=(G.INTENT_OWNED_HERE, G.INTENT_SPEC_MATCHES),
            follow_ups=_READY,
        ),
        # The store elects one binding; a loser destroys its resource and uses the winner's.
        (S.PROVISIONING, C.RESOURCE_READY): Transition(
            S.BOUND, (E.PUBLISH_BINDING,), follow_ups=(FollowUp(L.OUTBID, (C.ACQUIRE,)),)
        ),
        (S.BOUND, C.ACQUIRE): _attach(C.ACQUIRE),
        (S.BOUND, C.ACQUIRE_EXISTING): _attach(C.ACQUIRE_EXISTING),
        (S.UNBOUND, C.ACQUIRE_EXISTING): Transition(S.UNBOUND),
        (S.PROVISIONING, C.ACQUIRE_EXISTING): Transition(S.PROVISIONING),
        # The loss is persisted, so every worker (and ``mango sessions list``) sees it.
        (S.BOUND, C.REFERENCE_LOST): Transition(
            S.LOST, (E.RECORD_LOST,), guards=(G.REPORTS_BOUND_REF,)
        ),
        # Lost is explicit: acquiring again fails instead of creating an empty sandbox.
        (S.LOST, C.ACQUIRE): Transition(S.LOST, (E.FAIL_LOST,)),
        (S.LOST, C.ACQUIRE_EXISTING): Transition(S.LOST, (E.FAIL_LOST,)),
        (S.LOST, C.REFERENCE_LOST): Transition(S.LOST),
        (S.LOST, C.EVICT): Transition(S.LOST),
        # Idle eviction: the mark is a compare-and-set on the last use, so an
        # acquire that recorded its use first keeps the Session bound.
        (S.BOUND, C.EVICT): Transition(
            S.BOUND,
            (E.MARK_EVICTED,),
            guards=(G.OWNED_HERE,),
            follow_ups=(FollowUp(L.IDLE, (C.EVICTION_MARKED,)),),
        ),
        (S.BOUND, C.EVICTION_MARKED): Transition(S.EVICTED, (E.DESTROY_EVICTED,)),
        # Evicting again finishes a destroy the provider could not confirm.
        (S.EVICTED, C.EVICT): Transition(S.EVICTED, (E.DESTROY_EVICTED,), guards=(G.OWNED_HERE,)),
        # Evicted is explicit too: the next acquire says what happened.
        (S.EVICTED, C.ACQUIRE): Transition(S.EVICTED, (E.FAIL_EVICTED,)),
        (S.EVICTED, C.ACQUIRE_EXISTING): Transition(S.EVICTED, (E.FAIL_EVICTED,)),
        # A client handed out before the eviction met its destroy: nothing to record.
        (S.EVICTED, C.REFERENCE_LOST): Transition(S.EVICTED),
        (S.UNBOUND, C.DELETE): _DELETE,
        (S.PROVISIONING, C.DELETE): _DELETE,
        (S.BOUND, C.DELETE): _DELETE,
        (S.LOST, C.DELETE): _DELETE,
        (S.EVICTED, C.DELETE): _DELETE,
        (S.PAUSED, C.DELETE): _DELETE,
        # Deleting again repeats the idempotent teardown so a failed attempt can finish.
        (S.DELETING, C.DELETE): _DELETE,
        # The Session's skill pins, resource rows and output files go before its row may.
        (S.DELETING, C.DELETION_FINISHED): Transition(
            S.DELETED, (E.REMOVE_SESSION_SKILLS, E.REMOVE_SESSION_FILES, E.DELETE_SESSION)
        ),
        (S.DELETED, C.DELETE): Transition(S.DELETED),
        (S.DELETED, C.DELETION_FINISHED): Transition(S.DELETED),
        # Resource steps: before a tool step (skills, then File Resources), and
        # when the Session is idle.
        (S.BOUND, C.MATERIALIZE): _on_bound(
            C.MATERIALIZE, E.MATERIALIZE_SKILLS, E.MATERIALIZE_RESOURCES
        ),
        **_NO_SANDBOX_MATERIALIZE,
        (S.BOUND, C.PUBLISH_OUTPUTS): _on_bound(C.PUBLISH_OUTPUTS, E.PUBLISH_OUTPUTS),
        (S.UNBOUND, C.PUBLISH_OUTPUTS): Transition(S.UNBOUND),
        (S.PROVISIONING, C.PUBLISH_OUTPUTS): Transition(S.PROVISIONING),
        (S.LOST, C.PUBLISH_OUTPUTS): Transition(S.LOST, (E.FAIL_LOST,)),
        (S.EVICTED, C.PUBLISH_OUTPUTS): Transition(S.EVICTED, (E.FAIL_EVICTED,)),
        # Pause: the mark first, so a paused resource always has a paused record.
        (S.BOUND, C.PAUSE): Transition(
            S.PAUSED,
            (E.MARK_PAUSED, E.PAUSE_RESOURCE),
            guards=(G.OWNED_HERE,),
            follow_ups=(FollowUp(L.LOST, (C.REFERENCE_LOST, C.PAUSE)),),
        ),
        # Pausing again finishes a pause a crash left between the mark and the provider.
        (S.PAUSED, C.PAUSE): _pause(C.PAUSE),
        (S.LOST, C.PAUSE): Transition(S.LOST, (E.FAIL_LOST,)),
        (S.EVICTED, C.PAUSE): Transition(S.EVICTED, (E.FAIL_EVICTED,)),
        # Resume: the provider first, then the mark goes; resuming a running one is nothing.
        (S.BOUND, C.RESUME): Transition(S.BOUND, guards=(G.OWNED_HERE,)),
        (S.PAUSED, C.RESUME): Transition(
            S.PAUSED,
            (E.RESUME_RESOURCE,),
            guards=(G.OWNED_HERE,),
            follow_ups=(
                FollowUp(L.RESUMED, (C.RESOURCE_RESUMED,)),
                FollowUp(L.LOST, (C.REFERENCE_LOST, C.RESUME)),
            ),
        ),
        (S.PAUSED, C.RESOURCE_RESUMED): Transition(S.BOUND, (E.CLEAR_PAUSED,)),
        (S.LOST, C.RESUME): Transition(S.LOST, (E.FAIL_LOST,)),
        (S.EVICTED, C.RESUME): Transition(S.EVICTED, (E.FAIL_EVICTED,)),
        # Every use of a paused Session resumes it first.
        (S.PAUSED, C.ACQUIRE): _resume_then(C.ACQUIRE),
        (S.PAUSED, C.ACQUIRE_EXISTING): _resume_then(C.ACQUIRE_EXISTING),
        (S.PAUSED, C.MATERIALIZE): _resume_then(C.MATERIALIZE),
        (S.PAUSED, C.PUBLISH_OUTPUTS): _resume_then(C.PUBLISH_OUTPUTS),
        (S.PAUSED, C.REFERENCE_LOST): Transition(
            S.LOST, (E.RECORD_LOST,), guards=(G.REPORTS_BOUND_REF,)
        ),
        # The idle eviction, pausing: the mark is the same compare-and-set on
        # the last use as the eviction's.
        (S.BOUND, C.PAUSE_IDLE): Transition(
            S.BOUND,
            (E.MARK_PAUSED_IDLE,),
            guards=(G.OWNED_HERE,),
            follow_ups=(FollowUp(L.IDLE, (C.PAUSE_MARKED,)),),
        ),
        (S.BOUND, C.PAUSE_MARKED): Transition(
            S.PAUSED,
            (E.PAUSE_RESOURCE,),
            follow_ups=(FollowUp(L.LOST, (C.REFERENCE_LOST,)),),
        ),
        # Either eviction of a paused Session finishes its pause (the pass
        # lists the pauses the provider has not confirmed); nothing is destroyed.
        (S.PAUSED, C.PAUSE_IDLE): _pause(),
        (S.PAUSED, C.EVICT): _pause(),
        (S.LOST, C.PAUSE_IDLE): Transition(S.LOST),
        # An eviction that destroys, listed again, is finished whatever the action now.
        (S.EVICTED, C.PAUSE_IDLE): Transition(
            S.EVICTED, (E.DESTROY_EVICTED,), guards=(G.OWNED_HERE,)
        ),
    },
    signals={
        E.SETUP_RESOURCE: {L.READY},
        E.PUBLISH_BINDING: {L.OUTBID},
        E.ATTACH_RESOURCE: {L.LOST},
        E.MARK_EVICTED: {L.IDLE},
        E.MATERIALIZE_RESOURCES: {L.LOST},
        E.PUBLISH_OUTPUTS: {L.LOST},
        E.PAUSE_RESOURCE: {L.LOST},
        E.RESUME_RESOURCE: {L.RESUMED, L.LOST},
        E.MARK_PAUSED_IDLE: {L.IDLE},
    },
    # A fenced Session admits no new work, even on a sandbox that still exists.
    refusals={S.DELETING: G.NOT_DELETING},
)
"""The default lifecycle table; built (and so checked) when this module is imported."""


def transition(state: LifecycleState, command: LifecycleCommand) -> Transition:
    """Return the default table's transition, or raise :class:`InvalidTransition`."""
    return LIFECYCLE.step(state, command)


def observe(
    *,
    session_exists: bool,
    fenced: bool,
    has_intent: bool,
    has_binding: bool,
    binding_lost: bool = False,
    binding_evicted: bool = False,
    binding_paused: bool = False,
) -> LifecycleState:
    """Derive the durable state from the store's rows.

    ``binding_lost`` is the binding's persisted loss mark: it is set when the
    provider reported the bound resource gone (attach, keep-alive or any
    operation of a cached client), so ``lost`` survives restarts.
    ``binding_evicted`` is its eviction mark, which wins: the eviction
    destroyed the resource on purpose. ``binding_paused`` is its pause mark
    (set before the provider pauses, cleared after it resumed), which the
    loss and the eviction win over. A Session
    with no row is ``deleted`` if the caller knows it was fenced (its own
    deletion removed the row), else ``unbound``.
    """
    if not session_exists:
        return S.DELETED if fenced else S.UNBOUND
    if fenced:
        return S.DELETING
    if has_binding:
        # The eviction wins over the loss, the loss over the pause.
        marks = ((binding_evicted, S.EVICTED), (binding_lost, S.LOST), (binding_paused, S.PAUSED))
        return next((state for marked, state in marks if marked), S.BOUND)
    if has_intent:
        return S.PROVISIONING
    return S.UNBOUND
