"""The operation context: what one lifecycle command knows, and the one way it is observed.

An :class:`Operation` is what the caller asked (Session, command, spec). Its
:class:`Observation` is read by :func:`observe_session`, the only path from
the store's rows (and the client cache) to a :class:`LifecycleState`; acquire,
observe, release and delete_session all use it. Effects then report typed
:class:`Outcome` values; :class:`Facts` is the frozen record of the
observation and every outcome so far, from which each effect's handler
gathers its own frozen input. Nothing here is mutated by a handler: the
interpreter adds each outcome and passes the new :class:`Facts` on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar, Generic, TypeVar

import attrs

from mango.app.session_files import SessionFiles
from mango.app.session_manager.clients import CachedClient, ClientCache, SessionSandbox
from mango.app.skills import SessionSkills
from mango.domain.errors import LifecycleTableError, MangoError, SandboxNotFound
from mango.domain.lifecycle import LifecycleCommand, LifecycleSignal, LifecycleState, observe
from mango.domain.ports import BindingStore, Provider, Sandbox
from mango.domain.values import (
    Binding,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SessionRecord,
)

__all__ = [
    "Attached",
    "Bound",
    "Created",
    "Done",
    "EffectHandler",
    "Evicted",
    "Facts",
    "GuardCheck",
    "IntentHeld",
    "IntentInput",
    "Lost",
    "MarkedIdle",
    "Observation",
    "Operation",
    "Outbid",
    "Outcome",
    "Ports",
    "Ready",
    "SessionDeleted",
    "StaleObservation",
    "TornDown",
    "observe_session",
]

_O = TypeVar("_O", bound="Outcome")
_In = TypeVar("_In")


USE_INTERVAL = 30.0
"""Seconds between two writes of one Session's last use by one process (at acquire)."""


@attrs.frozen
class Ports:
    """What effects and guards work through, and the deployment's fleet rules."""

    provider: Provider
    store: BindingStore
    clients: ClientCache
    package_manager_hosts: tuple[str, ...] = ()
    max_sandboxes: int | None = None
    """``MANGO_MAX_SANDBOXES``: live sandboxes the whole deployment may hold (None: no limit)."""
    use_interval: float = USE_INTERVAL
    files: SessionFiles | None = None
    """The Session resource and output rows and the Files store (None: a manager without
    them, whose Sessions have no resources and publish no outputs)."""
    skills: SessionSkills | None = None
    """The skills and the Sessions' pins (None: a manager whose Sessions pin no skills)."""


# ------------------------------------------------------------------ outcomes


class Outcome:
    """What an effect reports; ``signal`` (if any) is what the table turns into follow-ups."""

    signal: ClassVar[LifecycleSignal | None] = None


@attrs.frozen
class Done(Outcome):
    """The effect did its work; nothing to report."""


@attrs.frozen
class IntentHeld(Outcome):
    """The provisioning intent is this worker's, as stored, for the Session row ``record``."""

    intent: ProvisioningIntent
    record: SessionRecord


@attrs.frozen
class Created(Outcome):
    """The provider created (or found) the resource, for the intent's ``spec``."""

    sandbox: Sandbox
    spec: SandboxSpec


@attrs.frozen
class Ready(Outcome):
    """The created resource is set up (packages, final network policy)."""

    signal = LifecycleSignal.READY


@attrs.frozen
class Bound(Outcome):
    """The binding is published; ``sandbox`` is the client handed out."""

    sandbox: SessionSandbox


@attrs.frozen
class Outbid(Outcome):
    """Another worker's binding won; ours was destroyed."""

    signal = LifecycleSignal.OUTBID
    winner: Binding


@attrs.frozen
class Attached(Outcome):
    """The bound resource answered; ``sandbox`` is the client handed out."""

    sandbox: SessionSandbox


@attrs.frozen
class Lost(Outcome):
    """The provider no longer knows ``ref``."""

    signal = LifecycleSignal.LOST
    ref: SandboxRef
    cause: SandboxNotFound | None = None


@attrs.frozen
class MarkedIdle(Outcome):
    """The binding was still unused and is now marked evicted (its resource goes next)."""

    signal = LifecycleSignal.IDLE
    binding: Binding


@attrs.frozen
class Evicted(Outcome):
    """The evicted binding's resource is destroyed."""

    binding: Binding


@attrs.frozen
class TornDown(Outcome):
    """The resource is destroyed; ``binding`` is what was bound after the fence, if anything."""

    binding: Binding | None


@attrs.frozen
class SessionDeleted(Outcome):
    """The Session row is gone; ``deleted`` is False if it already was."""

    deleted: bool


class StaleObservation(Exception):
    """The rows changed under the operation (another worker won): observe again."""


# ------------------------------------------------------------------ operation and observation


@attrs.frozen
class Operation:
    """One lifecycle command on one Session, as the caller asked for it."""

    session_id: str
    command: LifecycleCommand
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)
    force: bool = False
    """A forced deletion: purge by the provider's names, drop refused bindings."""
    reported: Lost | None = None
    """A loss a handed-out client met (the ``reference-lost`` command's subject)."""
    idle_for: float = 0.0
    """Seconds unused an eviction requires (the ``evict`` command's subject)."""
    fresh: bool = False
    """Observe the store's rows even when a client is cached (maintenance, not a turn)."""


@attrs.frozen
class Observation:
    """The rows that decide a Session's state, and that state.

    ``cached`` is a live client cached for this very Session row: it stands
    for the binding (which is then not read), so a later turn costs one read.
    """

    session_id: str
    state: LifecycleState
    record: SessionRecord | None = None
    binding: Binding | None = None
    intent: ProvisioningIntent | None = None
    cached: CachedClient | None = None


async def observe_session(
    ports: Ports, session_id: str, *, use_cache: bool = True, fenced_here: bool = False
) -> Observation:
    """Read the Session's rows (or its cached client) and derive its state.

    The Session row is read on every call, so a fence set (or a Session
    re-created) by another process is honoured at once: a cached client for
    another row is dropped. ``use_cache=False`` reads the binding even when a
    client is cached (the store's own view, loss marks included).
    ``fenced_here``: this operation fenced the Session itself, so a missing
    row was deleted, not never created.
    """
    record = await ports.store.get_session(session_id)
    cached = ports.clients.get(session_id)
    if cached is not None and (
        record is None or record.deleting or cached.session_created_at != record.created_at
    ):
        ports.clients.forget(session_id)
        cached = None
    if record is None:
        state = observe(
            session_exists=False, fenced=fenced_here, has_intent=False, has_binding=False
        )
        return Observation(session_id, state)
    if use_cache and cached is not None:
        # The row carries the binding's pause mark: a pause made elsewhere is seen here.
        state = observe(
            session_exists=True,
            fenced=False,
            has_intent=False,
            has_binding=True,
            binding_paused=record.paused,
        )
        return Observation(session_id, state, record, cached=cached)
    binding = await ports.store.get_binding(session_id)
    intent = None if binding is not None else await ports.store.get_intent(session_id)
    state = observe(
        session_exists=True,
        fenced=record.deleting,
        has_intent=intent is not None,
        has_binding=binding is not None,
        binding_lost=binding is not None and binding.lost,
        binding_evicted=binding is not None and binding.evicted,
        binding_paused=binding is not None and binding.paused,
    )
    return Observation(session_id, state, record, binding, intent)


# ------------------------------------------------------------------ facts


@attrs.frozen
class Facts:
    """The observation and every outcome so far, oldest first; handlers read, never write."""

    operation: Operation
    observed: Observation
    outcomes: tuple[Outcome, ...] = ()

    def adding(self, outcome: Outcome) -> Facts:
        """These facts and ``outcome``."""
        return attrs.evolve(self, outcomes=(*self.outcomes, outcome))

    def last(self, kind: type[_O]) -> _O | None:
        """The latest outcome of ``kind``, if any."""
        for outcome in reversed(self.outcomes):
            if isinstance(outcome, kind):
                return outcome
        return None

    def need(self, kind: type[_O]) -> _O:
        """The latest outcome of ``kind``; the table orders effects so that it exists."""
        found = self.last(kind)
        if found is None:  # pragma: no cover - a table whose effects are out of order
            raise MangoError(
                f"session {self.session_id!r}: {self.operation.command} needs a "
                f"{kind.__name__} outcome that no earlier effect reported"
            )
        return found

    @property
    def session_id(self) -> str:
        """The Session's id."""
        return self.operation.session_id

    @property
    def spec(self) -> SandboxSpec:
        """The spec in force: the stored intent's once a resource was created for it."""
        created = self.last(Created)
        return created.spec if created is not None else self.operation.spec

    @property
    def record(self) -> SessionRecord | None:
        """The Session row, as observed or as read when the intent was held."""
        held = self.last(IntentHeld)
        return held.record if held is not None else self.observed.record

    @property
    def intent(self) -> ProvisioningIntent | None:
        """The provisioning intent: the one held by this operation, else the observed one."""
        held = self.last(IntentHeld)
        return held.intent if held is not None else self.observed.intent

    @property
    def binding(self) -> Binding | None:
        """The binding: the one marked evicted or that outbid this operation, else the observed."""
        marked = self.last(MarkedIdle)
        if marked is not None:
            return marked.binding
        outbid = self.last(Outbid)
        return outbid.winner if outbid is not None else self.observed.binding

    @property
    def bound_ref(self) -> SandboxRef | None:
        """The bound resource's reference (from the binding or the cached client)."""
        binding, cached = self.binding, self.observed.cached
        if binding is not None:
            return binding.ref
        return cached.raw.ref if cached is not None else None

    @property
    def lost(self) -> Lost | None:
        """The loss this operation met, or the one it was asked to record."""
        found = self.last(Lost)
        return found if found is not None else self.operation.reported

    @property
    def sandbox(self) -> SessionSandbox | None:
        """The client to hand out, once bound or attached."""
        for outcome in reversed(self.outcomes):
            if isinstance(outcome, Bound | Attached):
                return outcome.sandbox
        return None


# ------------------------------------------------------------------ handlers


@attrs.frozen
class EffectHandler(Generic[_In]):
    """How one effect is performed.

    ``gather`` builds the effect's frozen input from the facts, ``perform``
    does the work through the ports and returns one of ``outcomes``; the
    signals those outcomes carry must be the ones the table declares for the
    effect (checked when a SessionManager is built).
    """

    gather: Callable[[Facts], _In]
    perform: Callable[[Ports, _In], Awaitable[Outcome]]
    outcomes: tuple[type[Outcome], ...] = (Done,)

    @property
    def signals(self) -> frozenset[LifecycleSignal]:
        """The signals this effect may report."""
        return frozenset(kind.signal for kind in self.outcomes if kind.signal is not None)

    async def run(self, ports: Ports, facts: Facts) -> Outcome:
        """Gather, perform, and check that the outcome is one this handler declares."""
        outcome = await self.perform(ports, self.gather(facts))
        if not isinstance(outcome, self.outcomes):
            raise LifecycleTableError(
                [f"an effect reported {type(outcome).__name__}, which its handler does not declare"]
            )
        return outcome


GuardCheck = Callable[[Ports, Facts, str], None]
"""A guard: ``(ports, facts, command)``; raises its typed error or returns."""


@attrs.frozen
class IntentInput:
    """An effect's input that is the Session and its provisioning intent."""

    session_id: str
    intent: ProvisioningIntent


def intent_input(facts: Facts) -> IntentInput:
    """The Session and the intent held or observed (the table persists or observes one first)."""
    intent = facts.intent
    if intent is None:  # pragma: no cover - the table puts an intent before these effects
        raise MangoError(f"session {facts.session_id!r} has no provisioning intent")
    return IntentInput(facts.session_id, intent)
