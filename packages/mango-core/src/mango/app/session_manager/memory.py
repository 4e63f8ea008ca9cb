"""Memory Store effects: the wave around a tool step, the final writeback, detaching.

* ``refresh-memory`` (a bound Session, before a tool): join the running wave,
  or write back what an interrupted step left and refresh every mount
  (:func:`mango.app.memory_wave.begin_wave`);
* ``write-back-memory`` (after the tool released its shared lock): once the
  wave's last tool is done, commit its changes and refresh
  (:func:`mango.app.memory_wave.end_wave`);
* ``final-memory-writeback`` (a deletion, after the fence, before the
  destroy): the same writeback on the bound sandbox, attached with the
  spec it was provisioned for (the stored intent's). A Session without a
  live binding has nothing to write back: nothing is provisioned, attached
  or retried for it; a sandbox already gone neither. Changes that cannot
  be committed are logged and the deletion goes on;
* ``detach-memory-stores`` (a finished deletion): the Session's attachment
  rows go before its row (the stores and their memories stay).

The first two report a vanished sandbox as :class:`Lost`, as attach does.
A manager without a :class:`~mango.domain.memories.MemoryRepository`, or a
spec without Memory Stores, does nothing.
"""

from __future__ import annotations

import logging

import attrs

from mango.app.memory_wave import WaveReport, begin_wave, end_wave
from mango.app.session_manager.context import Done, EffectHandler, Facts, Lost, Outcome, Ports
from mango.app.session_manager.provisioning import ATTACH_RESOURCE, AttachInput
from mango.app.session_manager.resources import bound_client, lost_client
from mango.domain.errors import CapabilityNotSupported, OwnershipError, SandboxNotFound
from mango.domain.memories import MemoryStoreMount
from mango.domain.ports import MemoryStoreSandbox, Sandbox
from mango.domain.values import SandboxSpec

__all__ = [
    "DETACH_MEMORY_STORES",
    "FINAL_MEMORY_WRITEBACK",
    "REFRESH_MEMORY",
    "WRITE_BACK_MEMORY",
    "MemoryWaved",
]

log = logging.getLogger("mango.app.session_manager")


@attrs.frozen
class MemoryWaved(Outcome):
    """A wave step ran (or had nothing to do)."""

    report: WaveReport


def _capable(sandbox: Sandbox, provider: str) -> MemoryStoreSandbox:
    if not isinstance(sandbox, MemoryStoreSandbox):
        raise CapabilityNotSupported(
            provider, [f"{provider} does not support memory store mounts, which the spec has"]
        )
    return sandbox


async def _wave(ports: Ports, given: AttachInput, *, ending: bool) -> MemoryWaved | Lost:
    mounts = given.spec.memory_stores
    if ports.memory is None or not mounts:
        return MemoryWaved(WaveReport())
    client = await bound_client(ports, given)
    if isinstance(client, Lost):
        return client
    sandbox = _capable(client, ports.provider.name)
    step = end_wave if ending else begin_wave
    try:
        report = await step(sandbox, ports.memory, mounts, given.session_id)
    except SandboxNotFound as exc:
        return lost_client(ports, given.session_id, client, exc)
    return MemoryWaved(report)


async def refresh_memory(ports: Ports, given: AttachInput) -> MemoryWaved | Lost:
    """Before a tool: join the running wave, or start one."""
    return await _wave(ports, given, ending=False)


async def write_back_memory(ports: Ports, given: AttachInput) -> MemoryWaved | Lost:
    """After a tool: commit the wave's changes once its last tool is done."""
    return await _wave(ports, given, ending=True)


REFRESH_MEMORY = EffectHandler(
    gather=ATTACH_RESOURCE.gather, perform=refresh_memory, outcomes=(MemoryWaved, Lost)
)
WRITE_BACK_MEMORY = EffectHandler(
    gather=ATTACH_RESOURCE.gather, perform=write_back_memory, outcomes=(MemoryWaved, Lost)
)


@attrs.frozen
class FinalInput:
    """The fenced Session, and whether the deletion is forced."""

    session_id: str
    force: bool


async def _live_sandbox(
    ports: Ports, given: FinalInput, mounts: tuple[MemoryStoreMount, ...]
) -> tuple[MemoryStoreSandbox, SandboxSpec] | None:
    """The bound sandbox, attached with its own spec; None if there is none to write from."""
    session_id = given.session_id
    binding = await ports.store.get_binding(session_id)
    if binding is None or binding.lost or binding.evicted:
        return None
    if binding.ref.provider != ports.provider.name:
        return None  # the destroy's ownership check says so
    intent = await ports.store.get_intent(session_id)
    spec = intent.spec if intent is not None else SandboxSpec(memory_stores=mounts)
    try:
        sandbox = await ports.provider.attach(session_id, binding.ref, spec)
    except SandboxNotFound:
        return None  # gone: nothing left to write back
    except OwnershipError:
        if not given.force:
            raise
        log.warning("session %s: forced deletion skips the final memory writeback", session_id)
        return None
    if not isinstance(sandbox, MemoryStoreSandbox):
        return None
    return sandbox, spec


async def final_memory_writeback(ports: Ports, given: FinalInput) -> MemoryWaved:
    """Write the bound sandbox's last Memory Store changes back (see the module)."""
    if ports.memory is None:
        return MemoryWaved(WaveReport())
    session_id = given.session_id
    mounts = tuple(await ports.memory.attachments(session_id))
    live = await _live_sandbox(ports, given, mounts) if mounts else None
    if live is None:
        return MemoryWaved(WaveReport())
    sandbox, spec = live
    try:
        report = await end_wave(sandbox, ports.memory, spec.memory_stores or mounts, session_id)
    except SandboxNotFound:
        return MemoryWaved(WaveReport())
    for error in report.errors:
        log.warning("session %s: final memory writeback: %s", session_id, error)
    return MemoryWaved(report)


FINAL_MEMORY_WRITEBACK = EffectHandler(
    gather=lambda facts: FinalInput(facts.session_id, facts.operation.force),
    perform=final_memory_writeback,
    outcomes=(MemoryWaved,),
)


@attrs.frozen
class SessionOnly:
    """Only the Session."""

    session_id: str


def _session(facts: Facts) -> SessionOnly:
    return SessionOnly(facts.session_id)


async def detach_memory_stores(ports: Ports, given: SessionOnly) -> Done:
    """Remove the deleted Session's attachment rows."""
    if ports.memory is not None:
        await ports.memory.detach_session(given.session_id)
    return Done()


DETACH_MEMORY_STORES = EffectHandler(gather=_session, perform=detach_memory_stores)
