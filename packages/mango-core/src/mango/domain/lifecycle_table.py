"""The lifecycle table's machinery: states, commands, transitions, the checks, the course.

:mod:`mango.domain.lifecycle` builds the default table from these types and
re-exports them; see its docstring for the rules a table is checked against.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from mango.domain.errors import InvalidTransition, LifecycleTableError

__all__ = [
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
]


class LifecycleState(enum.StrEnum):
    """Where a Session's sandbox stands."""

    UNBOUND = "unbound"
    PROVISIONING = "provisioning"
    BOUND = "bound"
    LOST = "lost"
    EVICTED = "evicted"
    PAUSED = "paused"
    """Bound, with the resource paused (or being paused): the next use resumes it."""
    DELETING = "deleting"
    DELETED = "deleted"


class LifecycleCommand(enum.StrEnum):
    """What happened, or what a caller asks for."""

    ACQUIRE = "acquire"
    ACQUIRE_EXISTING = "acquire-existing"
    RESOURCE_READY = "resource-ready"
    REFERENCE_LOST = "reference-lost"
    EVICT = "evict"
    EVICTION_MARKED = "eviction-marked"
    DELETE = "delete"
    DELETION_FINISHED = "deletion-finished"
    MATERIALIZE = "materialize"
    """Bring the sandbox's skills and File Resources in line with the Session's rows
    (before a tool step)."""
    PUBLISH_OUTPUTS = "publish-outputs"
    """Publish the sandbox's outputs directory as the Session's output files."""
    PAUSE = "pause"
    """Pause the bound sandbox (explicitly: ``mango sessions pause``)."""
    RESUME = "resume"
    """Resume a paused sandbox (explicitly, or before any other use of it)."""
    RESOURCE_RESUMED = "resource-resumed"
    """The provider resumed the paused resource: the mark may go."""
    PAUSE_IDLE = "pause-idle"
    """The idle eviction, where it pauses instead of destroying."""
    PAUSE_MARKED = "pause-marked"
    """The binding was still unused and is now marked paused: its resource pauses."""


class LifecycleEffect(enum.StrEnum):
    """Work the application layer performs, in the order given."""

    PERSIST_INTENT = "persist-intent"
    RESERVE_SLOT = "reserve-slot"
    CREATE_RESOURCE = "create-resource"
    SETUP_RESOURCE = "setup-resource"
    PUBLISH_BINDING = "publish-binding"
    RECORD_USE = "record-use"
    ATTACH_RESOURCE = "attach-resource"
    RECORD_LOST = "record-lost"
    FAIL_LOST = "fail-lost"
    MARK_EVICTED = "mark-evicted"
    DESTROY_EVICTED = "destroy-evicted"
    FAIL_EVICTED = "fail-evicted"
    FENCE_SESSION = "fence-session"
    DESTROY_RESOURCE = "destroy-resource"
    REMOVE_BINDING = "remove-binding"
    REMOVE_INTENT = "remove-intent"
    DELETE_SESSION = "delete-session"
    MATERIALIZE_SKILLS = "materialize-skills"
    MATERIALIZE_RESOURCES = "materialize-resources"
    FINISH_REMOVALS = "finish-removals"
    PUBLISH_OUTPUTS = "publish-outputs"
    REMOVE_SESSION_FILES = "remove-session-files"
    MARK_PAUSED = "mark-paused"
    MARK_PAUSED_IDLE = "mark-paused-idle"
    PAUSE_RESOURCE = "pause-resource"
    RESUME_RESOURCE = "resume-resource"
    CLEAR_PAUSED = "clear-paused"
    REMOVE_SESSION_SKILLS = "remove-session-skills"


class LifecycleGuard(enum.StrEnum):
    """A check a transition makes before its first effect; each raises a typed error."""

    OWNED_HERE = "owned-here"
    """The binding (else the intent) is this provider's: else ``OwnershipError``."""
    INTENT_OWNED_HERE = "intent-owned-here"
    """The intent being resumed is this provider's: else ``OwnershipError``."""
    INTENT_SPEC_MATCHES = "intent-spec-matches"
    """The intent being resumed is for the requested spec: else ``PermanentError``."""
    PACKAGES_PROVEN = "packages-proven"
    """The binding proves the requested package plan: else ``PermanentError``."""
    REPORTS_BOUND_REF = "reports-bound-ref"
    """The reported loss is of the bound resource: else ``PreconditionFailed``."""
    NOT_DELETING = "not-deleting"
    """The Session is not fenced for deletion: else ``SessionDeleting``."""


class LifecycleSignal(enum.StrEnum):
    """What a last effect reports that decides which commands follow."""

    READY = "ready"
    """The created resource is set up: it may be published."""
    OUTBID = "outbid"
    """Another worker's binding won the election: use that one."""
    LOST = "lost"
    """The provider no longer knows the bound resource."""
    IDLE = "idle"
    """The binding was still unused and is now marked evicted (or paused): its resource goes
    (or pauses)."""
    RESUMED = "resumed"
    """The provider resumed the paused resource."""


@attrs.frozen
class FollowUp:
    """The commands that run, in order, when the last effect reports ``signal``."""

    signal: LifecycleSignal
    commands: tuple[LifecycleCommand, ...]


@attrs.frozen
class Transition:
    """One step: the next state, the guards, the effects in order and the follow-ups."""

    state: LifecycleState
    effects: tuple[str, ...] = ()
    guards: tuple[str, ...] = attrs.field(default=(), kw_only=True)
    follow_ups: tuple[FollowUp, ...] = attrs.field(default=(), kw_only=True)

    def after(self, signal: LifecycleSignal | None) -> tuple[LifecycleCommand, ...]:
        """The follow-up commands for ``signal`` (none for ``None``)."""
        for follow_up in self.follow_ups:
            if follow_up.signal is signal:
                return follow_up.commands
        return ()


_Key = tuple[LifecycleState, LifecycleCommand]


def _rows(value: Mapping[_Key, Transition]) -> Mapping[_Key, Transition]:
    return MappingProxyType(dict(value))


def _refusals(value: Mapping[LifecycleState, str]) -> Mapping[LifecycleState, str]:
    return MappingProxyType(dict(value))


def _signals(
    value: Mapping[str, Iterable[LifecycleSignal]],
) -> Mapping[str, frozenset[LifecycleSignal]]:
    return MappingProxyType({name: frozenset(signals) for name, signals in value.items()})


@attrs.frozen(eq=False)
class LifecycleTable:
    """The lifecycle's rows, checked when built: :class:`LifecycleTableError` lists every fault."""

    transitions: Mapping[_Key, Transition] = attrs.field(converter=_rows)
    signals: Mapping[str, frozenset[LifecycleSignal]] = attrs.field(
        factory=dict, converter=_signals
    )
    """Which signals each effect may report; an effect not listed reports none."""
    refusals: Mapping[LifecycleState, str] = attrs.field(factory=dict, converter=_refusals)
    """The guard a state puts a command it does not admit to, before ``InvalidTransition``."""

    def __attrs_post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise LifecycleTableError(problems)

    def step(self, state: LifecycleState, command: LifecycleCommand) -> Transition:
        """The transition for ``(state, command)``, or raise :class:`InvalidTransition`."""
        try:
            return self.transitions[(state, command)]
        except KeyError:
            raise InvalidTransition(state.value, command.value) from None

    def emits(self, effect: str) -> frozenset[LifecycleSignal]:
        """The signals ``effect`` may report."""
        return self.signals.get(effect, frozenset())

    def refusal(self, state: LifecycleState) -> str | None:
        """The guard that refuses, with its own error, what ``state`` does not admit."""
        return self.refusals.get(state)

    @property
    def effects(self) -> frozenset[str]:
        """Every effect some transition performs."""
        return frozenset(e for row in self.transitions.values() for e in row.effects)

    @property
    def guards(self) -> frozenset[str]:
        """Every guard some transition (or refusal) checks."""
        named = {g for row in self.transitions.values() for g in row.guards}
        return frozenset(named | set(self.refusals.values()))

    def with_transitions(
        self,
        rows: Mapping[_Key, Transition],
        *,
        signals: Mapping[str, Iterable[LifecycleSignal]] | None = None,
    ) -> LifecycleTable:
        """A copy with ``rows`` added or replaced (and the new effects' ``signals``), validated."""
        return LifecycleTable(
            {**self.transitions, **rows},
            signals={**self.signals, **(signals or {})},
            refusals=self.refusals,
        )

    def course(self, state: LifecycleState, command: LifecycleCommand) -> Course:
        """Walk ``command`` from ``state``, follow-ups included."""
        return Course(self, state, [command])


@attrs.frozen
class Step:
    """A command and the transition the table gives it in the state it met."""

    command: LifecycleCommand
    transition: Transition


@attrs.define
class Course:
    """One command and its follow-ups walking a table; the caller performs each step.

    Call :meth:`next` for the next step (it raises :class:`InvalidTransition`
    if the current state does not admit the command), perform its guards and
    effects, then :meth:`settle` it with the signal its last effect reported.
    Follow-ups run before anything still pending, in the order declared.
    """

    table: LifecycleTable
    state: LifecycleState
    pending: list[LifecycleCommand]

    def next(self) -> Step | None:
        """The next step, or None when the command and its follow-ups are done."""
        if not self.pending:
            return None
        command = self.pending.pop(0)
        return Step(command, self.table.step(self.state, command))

    def settle(self, step: Step, signal: LifecycleSignal | None) -> None:
        """Move to the step's state and queue the follow-ups ``signal`` calls for."""
        self.pending[:0] = step.transition.after(signal)
        self.state = step.transition.state


def _problems(table: LifecycleTable) -> list[str]:
    """Every rule ``table`` breaks, one sentence each (empty if none)."""
    faults: dict[str, None] = {}  # ordered, and each fault once
    for (state, command), row in table.transitions.items():
        where = f"({state}, {command})"
        for position, effect in enumerate(row.effects[:-1]):
            if table.emits(effect):
                faults[
                    f"{where}: effect {effect} (number {position + 1} of {len(row.effects)}) may "
                    "report a signal, so it must be the last: the effects after it would be skipped"
                ] = None
        last = row.effects[-1] if row.effects else None
        may = table.emits(last) if last is not None else frozenset()
        declared = [follow_up.signal for follow_up in row.follow_ups]
        for signal in sorted(may - set(declared)):
            faults[f"{where}: {last} may report {signal}, but declares no follow-up for it"] = None
        for signal in sorted(set(declared) - may):
            faults[
                f"{where}: declares a follow-up on {signal}, which its last effect "
                f"({last or 'none'}) never reports"
            ] = None
        if len(declared) != len(set(declared)):
            faults[f"{where}: declares more than one follow-up for one signal"] = None
        walk = _Walk(table, where, faults)
        for follow_up in row.follow_ups:
            walk.ends(row.state, follow_up.commands, ((state, command),))
    for refused in table.refusals:
        if not any(state is refused for state, _ in table.transitions):
            faults[f"state {refused} has a refusal but no transition"] = None
    return list(faults)


@attrs.frozen
class _Walk:
    """Follows one row's follow-ups through the table, recording what goes wrong."""

    table: LifecycleTable
    where: str
    faults: dict[str, None]

    def ends(
        self,
        state: LifecycleState,
        commands: tuple[LifecycleCommand, ...],
        path: tuple[_Key, ...],
    ) -> set[LifecycleState]:
        """The states ``commands`` may end in from ``state``, whatever signals are reported."""
        states = {state}
        for command in commands:
            reached: set[LifecycleState] = set()
            for current in sorted(states):
                row = self.table.transitions.get((current, command))
                if row is None:
                    fault = f"{self.where}: follow-up {command} meets {current}, which refuses it"
                    self.faults[fault] = None
                    continue
                if (current, command) in path:
                    self.faults[f"{self.where}: follow-ups loop at ({current}, {command})"] = None
                    continue
                reached.add(row.state)  # the last effect reported nothing
                deeper = (*path, (current, command))
                for follow_up in row.follow_ups:
                    reached |= self.ends(row.state, follow_up.commands, deeper)
            states = reached
        return states
