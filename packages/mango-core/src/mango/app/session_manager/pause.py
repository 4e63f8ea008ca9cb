"""Pause effects: the mark, the provider's pause and resume, the mark's removal.

The record leads whenever the resource may be paused:

* ``mark-paused`` sets the binding's pause mark *before* the provider
  pauses anything (``mark-paused-idle`` is the idle eviction's variant: a
  compare-and-set on the last use, reporting ``idle`` when it marked);
* ``pause-resource`` pauses the resource through the provider
  (idempotent), then records that the provider confirmed it;
* ``resume-resource`` resumes it through the provider (idempotent) and
  reports ``resumed``; only then does ``clear-paused`` remove the mark.

So a crash between the provider and the record leaves a paused record over
a running resource, never the reverse: the next use resumes it (a no-op at
the provider), and the eviction pass, which lists pauses the provider has
not confirmed, pauses it again. A vanished resource is reported as ``lost``
like attach does. The provider pauses and resumes by reference
(:class:`~mango.domain.ports.PausableProvider`), as it destroys: the binding
is all the idle eviction and a restarted worker know; a provider that is not
one raises :class:`~mango.domain.errors.CapabilityNotSupported`.
"""

from __future__ import annotations

import attrs

from mango.app.session_manager.context import (
    Done,
    EffectHandler,
    Facts,
    Lost,
    Outcome,
    Ports,
    StaleObservation,
)
from mango.app.session_manager.guards import require_own
from mango.domain.errors import CapabilityNotSupported, MangoError, SandboxNotFound
from mango.domain.lifecycle import LifecycleSignal
from mango.domain.ports import PausableProvider
from mango.domain.values import Binding, SandboxRef

__all__ = [
    "CLEAR_PAUSED",
    "MARK_PAUSED",
    "MARK_PAUSED_IDLE",
    "PAUSE_RESOURCE",
    "RESUME_RESOURCE",
    "PausedIdle",
    "Resumed",
]


@attrs.frozen
class PausedIdle(Outcome):
    """The binding was still unused and is now marked paused (its resource pauses next)."""

    signal = LifecycleSignal.IDLE
    binding: Binding


@attrs.frozen
class Resumed(Outcome):
    """The provider resumed the paused resource (its mark goes next)."""

    signal = LifecycleSignal.RESUMED


@attrs.frozen
class MarkInput:
    """The bound reference to mark, and the idle time the idle variant requires."""

    session_id: str
    ref: SandboxRef
    idle_for: float


def _ref(facts: Facts) -> SandboxRef:
    ref = facts.bound_ref
    if ref is None:  # pragma: no cover - observed as bound or paused
        raise MangoError(f"session {facts.session_id!r} has no bound reference to pause")
    return ref


def _mark_input(facts: Facts) -> MarkInput:
    return MarkInput(facts.session_id, _ref(facts), facts.operation.idle_for)


async def mark_paused(ports: Ports, given: MarkInput) -> Done:
    """Set the pause mark before anything is paused; a moved binding means observe again."""
    if await ports.store.mark_paused(given.session_id, given.ref) is None:
        raise StaleObservation  # lost, evicted, fenced or deleted meanwhile
    return Done()


async def mark_paused_idle(ports: Ports, given: MarkInput) -> PausedIdle | Done:
    """Mark the binding paused if it is still unused; else leave the Session as it is."""
    session_id, ref = given.session_id, given.ref
    marked = await ports.store.mark_paused(session_id, ref, idle_for=given.idle_for)
    if marked is not None:
        return PausedIdle(marked)
    now = await ports.store.get_binding(session_id)
    if now is None or now.ref != ref or now.lost or now.evicted or now.paused:
        raise StaleObservation  # changed meanwhile: observe again
    return Done()  # used since it was listed: it stays bound


MARK_PAUSED = EffectHandler(gather=_mark_input, perform=mark_paused)
MARK_PAUSED_IDLE = EffectHandler(
    gather=_mark_input, perform=mark_paused_idle, outcomes=(PausedIdle, Done)
)


@attrs.frozen
class ResourceInput:
    """The paused (or to be paused) resource's reference."""

    session_id: str
    ref: SandboxRef


def _resource_input(facts: Facts) -> ResourceInput:
    return ResourceInput(facts.session_id, _ref(facts))


def _pausable(ports: Ports, given: ResourceInput) -> PausableProvider:
    provider = ports.provider
    require_own(provider, given.session_id, given.ref.provider, "pause")
    if not isinstance(provider, PausableProvider):
        raise CapabilityNotSupported(
            provider.name,
            [f"{provider.name} does not support pause and resume"],
            hint="choose a provider that declares pause (mango providers lists them)",
        )
    return provider


async def pause_resource(ports: Ports, given: ResourceInput) -> Done | Lost:
    """Pause the marked resource (idempotent), then record that the provider confirmed it."""
    try:
        await _pausable(ports, given).pause(given.session_id, given.ref)
    except SandboxNotFound as exc:
        ports.clients.forget(given.session_id, given.ref)
        return Lost(given.ref, exc)
    await ports.store.finish_pause(given.session_id, given.ref)
    return Done()


async def resume_resource(ports: Ports, given: ResourceInput) -> Resumed | Lost:
    """Resume the paused resource (idempotent); its mark is removed only after this."""
    try:
        await _pausable(ports, given).resume(given.session_id, given.ref)
    except SandboxNotFound as exc:
        ports.clients.forget(given.session_id, given.ref)
        return Lost(given.ref, exc)
    return Resumed()


async def clear_paused(ports: Ports, given: ResourceInput) -> Done:
    """Remove the pause mark; the next acquire writes its use again."""
    await ports.store.clear_paused(given.session_id, given.ref)
    ports.clients.uses.forget(given.session_id)
    return Done()


PAUSE_RESOURCE = EffectHandler(
    gather=_resource_input, perform=pause_resource, outcomes=(Done, Lost)
)
RESUME_RESOURCE = EffectHandler(
    gather=_resource_input, perform=resume_resource, outcomes=(Resumed, Lost)
)
CLEAR_PAUSED = EffectHandler(gather=_resource_input, perform=clear_paused)
