"""Teardown effects: fence, destroy, unbind, drop the intent, delete the Session row.

Teardown never creates or attaches (the Memory Store writeback before it,
:mod:`.memory`, attaches to a bound sandbox): it destroys through ``Provider.destroy``
the bound reference, or what ``Provider.find`` reports for an intent-only
Session, and when no binding is left (an intent-only Session, a deletion a
crash interrupted) a :class:`~mango.domain.ports.PurgingProvider` also purges
what it still holds under the Session's names (host directories, the
leftovers of a removal), so the Session row goes only after everything the
provider owns for it. A *forced* deletion purges by the provider's own names
even when records are missing or corrupt, and drops a binding the provider
refuses as someone else's instead of failing.
"""

from __future__ import annotations

import logging

import attrs

from mango.app.session_manager.context import (
    Done,
    EffectHandler,
    Facts,
    Ports,
    SessionDeleted,
    TornDown,
)
from mango.app.session_manager.guards import require_own
from mango.domain.errors import OwnershipError
from mango.domain.ports import PurgingProvider
from mango.domain.values import Binding, SandboxRef

__all__ = [
    "DELETE_SESSION",
    "DESTROY_RESOURCE",
    "FENCE_SESSION",
    "REMOVE_BINDING",
    "REMOVE_INTENT",
]

log = logging.getLogger("mango.app.session_manager")


@attrs.frozen
class SessionInput:
    """Only the Session: the effect reads what it needs after the fence itself."""

    session_id: str


def _session(facts: Facts) -> SessionInput:
    return SessionInput(facts.session_id)


async def fence_session(ports: Ports, given: SessionInput) -> Done:
    """Set the deletion fence: from here on no worker adds an intent or a binding."""
    ports.clients.forget(given.session_id)
    await ports.store.fence_session(given.session_id)
    return Done()


FENCE_SESSION = EffectHandler(gather=_session, perform=fence_session)


@attrs.frozen
class DestroyInput:
    """The fenced Session, and whether the deletion is forced."""

    session_id: str
    force: bool


async def destroy_resource(ports: Ports, given: DestroyInput) -> TornDown:
    """Destroy what the Session holds; an ownership refusal says how to force it."""
    try:
        return await _teardown(ports, given)
    except OwnershipError as exc:
        if exc.hint is not None:
            raise
        raise OwnershipError(
            str(exc),
            hint=f"if a command damaged the sandbox's records, 'mango sessions delete "
            f"--force {given.session_id}' removes what mango owns under the Session's names",
        ) from exc


async def _teardown(ports: Ports, given: DestroyInput) -> TornDown:
    session_id, provider = given.session_id, ports.provider
    # Re-read after the fence: from here on no worker can add an intent or a binding.
    binding = await ports.store.get_binding(session_id)
    if binding is not None:
        require_own(provider, session_id, binding.ref.provider, "delete")
        await _destroy(ports, given, binding.ref)
    else:
        intent = await ports.store.get_intent(session_id)
        if intent is not None:
            require_own(provider, session_id, intent.provider, "delete")
            # An intent-only Session may or may not have a resource (crash
            # before or after create): ask, never create one to find out.
            found = await _find_for_deletion(ports, given)
            if found is not None:
                await _destroy(ports, given, found)
    if isinstance(provider, PurgingProvider) and (binding is None or given.force):
        # No binding left to say what exists (an intent-only Session, or
        # rows removed by an earlier pass that a crash cut short): the
        # provider removes whatever it still holds under the Session's
        # names before the row may go.
        await provider.purge(session_id, force=given.force)
    return TornDown(binding)


async def _find_for_deletion(ports: Ports, given: DestroyInput) -> SandboxRef | None:
    try:
        return await ports.provider.find(given.session_id)
    except OwnershipError as exc:
        if not given.force:
            raise
        log.warning("session %s: forced deletion skips %s", given.session_id, exc)
        return None


async def _destroy(ports: Ports, given: DestroyInput, ref: SandboxRef) -> None:
    try:
        await ports.provider.destroy(given.session_id, ref)
    except OwnershipError as exc:
        if not given.force:
            raise
        # Not this Session's to remove: a forced deletion forgets the row only.
        log.warning("session %s: forced deletion leaves %s alone: %s", given.session_id, ref, exc)


DESTROY_RESOURCE = EffectHandler(
    gather=lambda facts: DestroyInput(facts.session_id, facts.operation.force),
    perform=destroy_resource,
    outcomes=(TornDown,),
)


@attrs.frozen
class UnbindInput:
    """The binding the teardown destroyed (None if there was none)."""

    session_id: str
    binding: Binding | None


def _unbind_input(facts: Facts) -> UnbindInput:
    torn_down = facts.last(TornDown)
    return UnbindInput(facts.session_id, torn_down.binding if torn_down is not None else None)


async def remove_binding(ports: Ports, given: UnbindInput) -> Done:
    """Delete the destroyed resource's binding (compare-and-delete)."""
    if given.binding is not None:
        await ports.store.delete_binding(given.binding)
    return Done()


REMOVE_BINDING = EffectHandler(gather=_unbind_input, perform=remove_binding)


async def remove_intent(ports: Ports, given: SessionInput) -> Done:
    """Delete a leftover intent; another provider's may stand for a resource only it can find."""
    intent = await ports.store.get_intent(given.session_id)
    if intent is not None:
        require_own(ports.provider, given.session_id, intent.provider, "reconcile")
        await ports.store.delete_intent(intent)
    return Done()


REMOVE_INTENT = EffectHandler(gather=_session, perform=remove_intent)


async def delete_session(ports: Ports, given: SessionInput) -> SessionDeleted:
    """Delete the fenced Session's row."""
    return SessionDeleted(await ports.store.delete_session(given.session_id))


DELETE_SESSION = EffectHandler(gather=_session, perform=delete_session, outcomes=(SessionDeleted,))
