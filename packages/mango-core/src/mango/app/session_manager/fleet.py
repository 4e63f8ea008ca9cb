"""Fleet effects: a place under the deployment's limit, the last use, the idle eviction.

* ``reserve-slot``: before anything is created, the intent takes one of
  ``MANGO_MAX_SANDBOXES`` places. The store counts the live sandboxes and
  reserves in one atomic decision (PostgreSQL: one transaction under one
  lock), so no race between workers exceeds the limit; a full fleet removes
  the intent and raises :class:`~mango.domain.errors.FleetFull`. An intent
  that holds its place (a resumed one) keeps it; with no limit the place is
  only marked, so the count is right if a limit is set later.
* ``record-use``: an acquire of a bound Session notes its use, at most once
  per :data:`~mango.app.session_manager.context.USE_INTERVAL` per Session
  and process (a busy Session's turns cost no extra round trip); a
  binding marked evicted meanwhile makes the acquire observe again, and so
  fail with what happened.
* ``mark-evicted``: a compare-and-set on the last use: the binding is marked
  only if it is still unused for the eviction's idle time, so an acquire
  that recorded its use first keeps it; it reports ``idle`` when it marked.
* ``destroy-evicted``: the marked resource is destroyed through the
  provider (idempotent), then the eviction is recorded as finished.
* ``fail-evicted``: the next acquire says the sandbox was evicted, when and
  after how long unused, instead of reporting a loss.

A command that runs longer than the idle time, with no other use of its
Session meanwhile, counts as idle: the idle time must exceed the longest
command (the use is recorded when a step acquires the sandbox).
"""

from __future__ import annotations

from datetime import UTC
from typing import NoReturn

import attrs

from mango.app.session_manager.context import (
    Done,
    EffectHandler,
    Evicted,
    Facts,
    IntentInput,
    MarkedIdle,
    Ports,
    StaleObservation,
    intent_input,
)
from mango.app.session_manager.guards import require_own
from mango.domain.durations import format_duration
from mango.domain.errors import MangoError, SandboxEvicted
from mango.domain.values import Binding, SandboxRef

__all__ = ["DESTROY_EVICTED", "FAIL_EVICTED", "MARK_EVICTED", "RECORD_USE", "RESERVE_SLOT"]


# ------------------------------------------------------------------ reserve-slot


async def reserve_slot(ports: Ports, given: IntentInput) -> Done:
    """Take the intent's place under the limit; :class:`FleetFull` when there is none."""
    if not await ports.store.reserve_slot(given.intent, ports.max_sandboxes):
        raise StaleObservation  # another worker replaced or removed the intent
    return Done()


RESERVE_SLOT = EffectHandler(gather=intent_input, perform=reserve_slot)


# ------------------------------------------------------------------ record-use


@attrs.frozen
class UseInput:
    """The bound reference whose use is recorded."""

    session_id: str
    ref: SandboxRef | None


def _use_input(facts: Facts) -> UseInput:
    return UseInput(facts.session_id, facts.bound_ref)


async def record_use(ports: Ports, given: UseInput) -> Done:
    """Note the use (coarsely); an evicted or replaced binding means observe again."""
    session_id, ref = given.session_id, given.ref
    if ref is None:  # pragma: no cover - observed as bound
        raise MangoError(f"session {session_id!r} has no bound reference to use")
    if ports.clients.uses.recent(session_id, ref, ports.use_interval):
        return Done()
    if not await ports.store.record_use(session_id, ref):
        ports.clients.forget(session_id)
        raise StaleObservation
    ports.clients.uses.note(session_id, ref)
    return Done()


RECORD_USE = EffectHandler(gather=_use_input, perform=record_use)


# ------------------------------------------------------------------ mark-evicted


@attrs.frozen
class MarkInput:
    """The bound reference and the idle time its eviction requires."""

    session_id: str
    ref: SandboxRef | None
    idle_for: float


def _mark_input(facts: Facts) -> MarkInput:
    return MarkInput(facts.session_id, facts.bound_ref, facts.operation.idle_for)


async def mark_evicted(ports: Ports, given: MarkInput) -> MarkedIdle | Done:
    """Mark the binding evicted if it is still unused; else leave the Session as it is."""
    session_id, ref = given.session_id, given.ref
    if ref is None:  # pragma: no cover - observed as bound
        raise MangoError(f"session {session_id!r} has no bound reference to evict")
    marked = await ports.store.mark_evicted(session_id, ref, given.idle_for)
    if marked is not None:
        ports.clients.forget(session_id, ref)
        return MarkedIdle(marked)
    now = await ports.store.get_binding(session_id)
    if now is None or now.ref != ref or now.lost or now.evicted:
        raise StaleObservation  # lost, evicted or deleted meanwhile: observe again
    return Done()  # used since it was listed: it stays bound


MARK_EVICTED = EffectHandler(gather=_mark_input, perform=mark_evicted, outcomes=(MarkedIdle, Done))


# ------------------------------------------------------------------ destroy-evicted


@attrs.frozen
class EvictedInput:
    """The binding marked evicted (by this operation, or as observed)."""

    session_id: str
    binding: Binding


def _evicted_input(facts: Facts) -> EvictedInput:
    binding = facts.binding
    if binding is None or not binding.evicted:  # pragma: no cover - marked or observed evicted
        raise MangoError(f"session {facts.session_id!r} has no evicted binding")
    return EvictedInput(facts.session_id, binding)


async def destroy_evicted(ports: Ports, given: EvictedInput) -> Evicted:
    """Destroy the evicted resource (idempotent) and record that the eviction finished."""
    session_id, ref = given.session_id, given.binding.ref
    require_own(ports.provider, session_id, ref.provider, "evict")
    await ports.provider.destroy(session_id, ref)
    await ports.store.finish_eviction(session_id, ref)
    return Evicted(given.binding)


DESTROY_EVICTED = EffectHandler(gather=_evicted_input, perform=destroy_evicted, outcomes=(Evicted,))


# ------------------------------------------------------------------ fail-evicted


async def fail_evicted(_ports: Ports, given: EvictedInput) -> NoReturn:
    """Refuse to hand out (or replace) a workspace the eviction took, saying so."""
    eviction = given.binding.eviction
    if eviction is None:  # pragma: no cover - observed evicted
        raise MangoError(f"session {given.session_id!r} has no eviction to report")
    idle = format_duration(eviction.idle_seconds)
    when = eviction.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    gone = "was destroyed" if eviction.finished else "is being destroyed"
    raise SandboxEvicted(
        f"the sandbox of session {given.session_id!r} was evicted after {idle} unused "
        f"(at {when}, MANGO_EVICT_IDLE_AFTER); its workspace {gone} "
        "and will not be replaced by an empty one",
        idle_seconds=eviction.idle_seconds,
        finished=eviction.finished,
        hint="delete the session (mango sessions delete) and start a new one",
    )


FAIL_EVICTED = EffectHandler(gather=_evicted_input, perform=fail_evicted, outcomes=())
