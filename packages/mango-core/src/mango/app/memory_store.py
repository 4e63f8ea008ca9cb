"""An in-memory :class:`~mango.domain.ports.BindingStore` for unit tests and plugin authors.

It has the same semantics as the PostgreSQL store (insert-if-absent returns
the authoritative row, compare-and-delete, the deletion fence) within one
process. It is not durable: never use it where identity must survive a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from mango.app.clock import SystemClock
from mango.domain.errors import FleetFull, PreconditionFailed, ProvisioningBlocked
from mango.domain.hashing import session_key_hash
from mango.domain.ports import Clock
from mango.domain.registry import new_namespace, validate_namespace
from mango.domain.values import (
    Binding,
    Eviction,
    OwnedResource,
    ProvisioningIntent,
    SandboxRef,
    SessionRecord,
    validate_session_id,
)

__all__ = ["InMemoryBindingStore"]


@attrs.define
class InMemoryBindingStore:
    """Process-local BindingStore with the PostgreSQL store's semantics."""

    clock: Clock = attrs.field(factory=SystemClock)
    sessions: dict[str, SessionRecord] = attrs.field(factory=dict)
    intents: dict[str, tuple[ProvisioningIntent, float]] = attrs.field(factory=dict)
    bindings: dict[str, Binding] = attrs.field(factory=dict)
    reserved: set[str] = attrs.field(factory=set)
    """Sessions whose intent holds a place under the fleet limit."""
    used_at: dict[str, datetime] = attrs.field(factory=dict)
    """Each binding's last use (its creation until an acquire records one)."""
    namespace: str = attrs.field(factory=new_namespace, converter=validate_namespace, kw_only=True)
    """The deployment namespace: random per store unless given."""
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, alias="_lock")
    _sequence: int = attrs.field(default=0, alias="_sequence")

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence

    async def deployment_namespace(self) -> str:
        """This store's namespace (fixed for its lifetime)."""
        return self.namespace

    async def ensure_session(self, session_id: str) -> SessionRecord:
        """Create the Session if absent; return the stored row."""
        validate_session_id(session_id)
        async with self._lock:
            record = self.sessions.get(session_id)
            if record is None:
                record = SessionRecord(session_id=session_id, created_at=self.clock.now())
                self.sessions[session_id] = record
            return record

    def _with_pause(self, record: SessionRecord) -> SessionRecord:
        binding = self.bindings.get(record.session_id)
        return attrs.evolve(record, paused_at=None if binding is None else binding.paused_at)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The Session row or None, with its binding's pause mark projected."""
        record = self.sessions.get(session_id)
        return None if record is None else self._with_pause(record)

    async def list_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Sessions, oldest first."""
        ordered = sorted(self.sessions.values(), key=lambda r: (r.created_at, r.session_id))
        return [self._with_pause(record) for record in ordered[: max(limit, 0)]]

    async def fence_session(self, session_id: str) -> SessionRecord | None:
        """Set the deletion fence once; None if the Session is absent."""
        async with self._lock:
            record = self.sessions.get(session_id)
            if record is None:
                return None
            if record.deleting_at is None:
                record = attrs.evolve(record, deleting_at=self.clock.now())
                self.sessions[session_id] = record
            return record

    async def delete_session(self, session_id: str) -> bool:
        """Delete a fenced Session with nothing left pointing at a resource."""
        async with self._lock:
            record = self.sessions.get(session_id)
            if record is None:
                return False
            if record.deleting_at is None:
                raise PreconditionFailed(f"session {session_id!r} is not fenced for deletion")
            if session_id in self.bindings or session_id in self.intents:
                raise PreconditionFailed(
                    f"session {session_id!r} still has a sandbox binding or provisioning intent"
                )
            del self.sessions[session_id]
            return True

    async def list_deleting_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        """Fenced Sessions, oldest fence first."""
        fenced = [r for r in self.sessions.values() if r.deleting_at is not None]
        fenced.sort(key=lambda r: (r.deleting_at, r.session_id))
        return fenced[: max(limit, 0)]

    async def get_intent(self, session_id: str) -> ProvisioningIntent | None:
        """The intent or None, with ``deleting`` projected."""
        entry = self.intents.get(session_id)
        return None if entry is None else self._project(entry[0])

    def _project(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        record = self.sessions.get(intent.session_id)
        return attrs.evolve(intent, deleting=record is not None and record.deleting)

    async def put_intent(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        """Insert-if-absent; refuse an absent, fenced or bound Session."""
        async with self._lock:
            record = self.sessions.get(intent.session_id)
            if record is None or record.deleting or intent.session_id in self.bindings:
                raise ProvisioningBlocked(
                    f"session {intent.session_id!r} is absent, being deleted, or already bound"
                )
            existing = self.intents.get(intent.session_id)
            if existing is None:
                stored = attrs.evolve(intent, deleting=False)
                self.intents[intent.session_id] = (stored, self._next())
                return stored
            return self._project(existing[0])

    async def list_intents(self, provider: str, limit: int = 100) -> Sequence[ProvisioningIntent]:
        """That provider's intents, oldest first."""
        entries = sorted(
            (order, intent.session_id, intent)
            for intent, order in self.intents.values()
            if intent.provider == provider
        )
        return [self._project(intent) for _, _, intent in entries[: max(limit, 0)]]

    async def delete_intent(self, intent: ProvisioningIntent) -> None:
        """Compare-and-delete on (session, provider, spec hash)."""
        async with self._lock:
            entry = self.intents.get(intent.session_id)
            if entry is None:
                return
            stored = entry[0]
            if (stored.provider, stored.spec_hash) != (intent.provider, intent.spec_hash):
                raise PreconditionFailed(
                    f"provisioning intent of session {intent.session_id!r} changed to "
                    f"{stored.provider}/{stored.spec_hash}"
                )
            del self.intents[intent.session_id]
            self.reserved.discard(intent.session_id)

    async def get_binding(self, session_id: str) -> Binding | None:
        """The binding or None."""
        return self.bindings.get(session_id)

    async def put_binding(self, binding: Binding) -> Binding:
        """Insert-if-absent and drop the Session's intent; return the winner."""
        async with self._lock:
            if binding.session_id not in self.sessions:
                raise ProvisioningBlocked(f"session {binding.session_id!r} does not exist")
            for other in self.bindings.values():
                if other.ref == binding.ref and other.session_id != binding.session_id:
                    raise PreconditionFailed(f"{binding.ref} is bound to another session")
            winner = self.bindings.setdefault(binding.session_id, binding)
            if winner is binding:
                self.used_at[binding.session_id] = self.clock.now()
            self.intents.pop(binding.session_id, None)
            self.reserved.discard(binding.session_id)
            return winner

    async def delete_binding(self, binding: Binding) -> None:
        """Compare-and-delete on (session, provider, external id)."""
        async with self._lock:
            stored = self.bindings.get(binding.session_id)
            if stored is None:
                return
            if stored.ref != binding.ref:
                raise PreconditionFailed(
                    f"binding of session {binding.session_id!r} changed to {stored.ref}"
                )
            del self.bindings[binding.session_id]
            self.used_at.pop(binding.session_id, None)

    async def mark_binding_lost(self, session_id: str, ref: SandboxRef) -> Binding | None:
        """Compare-and-set the loss mark on (session, provider, external id); idempotent."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            if stored is None or stored.ref != ref or stored.evicted:
                return None
            if stored.lost_at is None:
                # A lost resource is paused no more: the pause mark goes with the loss.
                stored = attrs.evolve(
                    stored, lost_at=self.clock.now(), paused_at=None, pause_finished=False
                )
                self.bindings[session_id] = stored
            return stored

    # ------------------------------------------------------------ the fleet

    def _live(self) -> int:
        # An eviction whose destroy did not finish may still hold its resource.
        bound = sum(
            1
            for b in self.bindings.values()
            if not b.lost and (b.eviction is None or not b.eviction.finished)
        )
        return bound + len(self.reserved & set(self.intents))

    async def reserve_slot(self, intent: ProvisioningIntent, limit: int | None) -> bool:
        """Take a place for ``intent`` under ``limit``; a full fleet removes it (``FleetFull``)."""
        async with self._lock:
            entry = self.intents.get(intent.session_id)
            if entry is None or (entry[0].provider, entry[0].spec_hash) != (
                intent.provider,
                intent.spec_hash,
            ):
                return False
            if intent.session_id in self.reserved:
                return True
            if limit is not None and self._live() >= limit:
                del self.intents[intent.session_id]
                raise FleetFull(limit, provider=intent.provider)
            self.reserved.add(intent.session_id)
            return True

    async def live_sandboxes(self) -> int:
        """Bindings neither lost nor evicted (destroy finished), and reserved intents."""
        return self._live()

    async def record_use(self, session_id: str, ref: SandboxRef) -> bool:
        """Note the use now; False if the Session is not bound to ``ref``, evicted or paused."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            if stored is None or stored.ref != ref or stored.evicted or stored.paused:
                return False
            self.used_at[session_id] = self.clock.now()
            return True

    def _idle_since(self, session_id: str, idle_for: float, now: datetime) -> float | None:
        used = self.used_at.get(session_id)
        idle = None if used is None else (now - used).total_seconds()
        return idle if idle is not None and idle >= idle_for else None

    async def list_idle(
        self, provider: str, idle_for: float, limit: int = 100
    ) -> Sequence[Binding]:
        """That provider's bindings to evict (idle; evicted or paused, not finished)."""
        now = self.clock.now()
        found: list[tuple[datetime, str, Binding]] = []
        for session_id, binding in self.bindings.items():
            record = self.sessions.get(session_id)
            if binding.ref.provider != provider or record is None or record.deleting:
                continue
            if binding.eviction is not None:
                if not binding.eviction.finished:
                    found.append((binding.eviction.at, session_id, binding))
            elif binding.paused_at is not None:
                if not binding.pause_finished and not binding.lost:
                    found.append((binding.paused_at, session_id, binding))
            elif not binding.lost and self._idle_since(session_id, idle_for, now) is not None:
                found.append((self.used_at[session_id], session_id, binding))
        found.sort(key=lambda item: (item[0], item[1]))
        return [binding for _, _, binding in found[: max(limit, 0)]]

    async def mark_evicted(
        self, session_id: str, ref: SandboxRef, idle_for: float
    ) -> Binding | None:
        """Compare-and-set the eviction mark on a binding still unused for ``idle_for``."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            record = self.sessions.get(session_id)
            if stored is None or stored.ref != ref or stored.lost or stored.evicted:
                return None
            if record is None or record.deleting or stored.paused:
                return None
            now = self.clock.now()
            idle = self._idle_since(session_id, idle_for, now)
            if idle is None:
                return None
            stored = attrs.evolve(stored, eviction=Eviction(at=now, idle_seconds=idle))
            self.bindings[session_id] = stored
            return stored

    async def finish_eviction(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the evicted resource was destroyed; idempotent."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            if stored is not None and stored.ref == ref and stored.eviction is not None:
                finished = attrs.evolve(stored.eviction, finished=True)
                self.bindings[session_id] = attrs.evolve(stored, eviction=finished)

    # ------------------------------------------------------------ pause

    async def mark_paused(
        self, session_id: str, ref: SandboxRef, *, idle_for: float | None = None
    ) -> Binding | None:
        """Set the pause mark (idempotent); with ``idle_for``, only on a binding still unused."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            record = self.sessions.get(session_id)
            if stored is None or stored.ref != ref or stored.lost or stored.evicted:
                return None
            if record is None or record.deleting:
                return None
            now = self.clock.now()
            if idle_for is not None and (
                stored.paused or self._idle_since(session_id, idle_for, now) is None
            ):
                return None
            if stored.paused_at is None:
                stored = attrs.evolve(stored, paused_at=now, pause_finished=False)
                self.bindings[session_id] = stored
            return stored

    async def finish_pause(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the provider paused ``ref``; idempotent, nothing if no longer marked."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            if stored is not None and stored.ref == ref and stored.paused:
                self.bindings[session_id] = attrs.evolve(stored, pause_finished=True)

    async def clear_paused(self, session_id: str, ref: SandboxRef) -> None:
        """Remove the pause mark of ``ref`` (the provider resumed it); idempotent."""
        async with self._lock:
            stored = self.bindings.get(session_id)
            if stored is not None and stored.ref == ref and stored.paused:
                stored = attrs.evolve(stored, paused_at=None, pause_finished=False)
                self.bindings[session_id] = stored

    def backdate_use(self, session_id: str, seconds: float) -> None:
        """Make the Session's last use ``seconds`` older (tests: an idle Session, no sleeping)."""
        self.used_at[session_id] -= timedelta(seconds=seconds)

    async def claimed(
        self, provider: str, resources: Sequence[OwnedResource]
    ) -> frozenset[SandboxRef]:
        """The refs a binding names or whose session hash is a Session's (``SessionClaims``)."""
        hashes = {session_key_hash(session_id) for session_id in self.sessions}
        bound = {b.ref for b in self.bindings.values() if b.ref.provider == provider}
        return frozenset(r.ref for r in resources if r.ref in bound or r.session_hash in hashes)
