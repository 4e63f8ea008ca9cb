"""SessionManager: exactly one durable sandbox per Session.

The BindingStore is the source of truth; the in-process map is only a cache
of live clients. Operations on one Session are serialised inside the process;
across processes the database elects one winner.

Every operation runs the lifecycle state machine (:mod:`mango.domain.lifecycle`):
the Session's state is observed from the store's rows, ``transition(state,
command)`` gives the effects, and each effect is performed by the handler
registered for it in ``_HANDLERS``. A handler may report what happened as
follow-up commands (``resource-ready`` after setup, ``reference-lost`` when the
provider no longer knows the resource), which run through the table in turn.

Provisioning order: intent (insert-if-absent) -> create (idempotent by
session key) -> [limited network: setup allowlist] -> package setup ->
[limited network: final allowlist] -> binding (insert-if-absent; the loser's
resource is destroyed). A limited-network sandbox gets its final allowlist
again whenever a client is attached (the provider re-applies it only if the
applied policy drifted), and a cached client gets it when the spec's
allowlist changes. A failure leaves the intent, never a binding, so a
retry or :meth:`SessionManager.reconcile_provisioning` resumes. Teardown
never creates or attaches: it destroys through ``Provider.destroy`` the bound
reference, or what ``Provider.find`` reports for an intent-only Session, and
when no binding is left (an intent-only Session, a deletion a crash
interrupted) a :class:`~mango.domain.ports.PurgingProvider` also purges what
it still holds under the Session's names (host directories, the leftovers of
a removal), so the Session row goes only after everything the provider owns
for it. A *forced* deletion (``delete_session(..., force=True)``) purges by
the provider's own names even when records are missing or corrupt, and drops
a binding the provider refuses as someone else's instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Generic, TypeVar

import attrs

from mango.app.packages import install_packages
from mango.app.wrappers import SandboxWrapper
from mango.domain.capabilities import Capability, CapabilitySet, admit
from mango.domain.deadline import deadline_scope
from mango.domain.errors import (
    CapabilityNotSupported,
    InvalidInput,
    InvalidTransition,
    MangoError,
    OwnershipError,
    PermanentError,
    ProvisioningBlocked,
    SandboxNotFound,
    SessionDeleting,
)
from mango.domain.hashing import (
    binding_proves_package_setup,
    binding_spec_hash,
    spec_hash,
    spec_hash_matches,
)
from mango.domain.lifecycle import (
    LifecycleCommand,
    LifecycleEffect,
    LifecycleState,
    observe,
    transition,
)
from mango.domain.ports import (
    BindingStore,
    KeepAliveSandbox,
    LimitedNetworkSandbox,
    Provider,
    PurgingProvider,
    Sandbox,
)
from mango.domain.registry import Quirk
from mango.domain.values import (
    Binding,
    Command,
    ExecEvent,
    ExecResult,
    NetworkMode,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SessionRecord,
    validate_session_id,
)

__all__ = ["ReconcileReport", "SessionManager"]

log = logging.getLogger(__name__)
_Item = TypeVar("_Item")
_C = LifecycleCommand
_E = LifecycleEffect
_S = LifecycleState

_MAX_REOBSERVE = 4
"""How often one operation re-reads the store after finding its rows changed
under it (another worker bound the Session first) before giving up."""


@attrs.frozen
class ReconcileReport:
    """What one reconciliation pass did; every item was attempted."""

    attempted: int = 0
    completed: int = 0
    failures: tuple[tuple[str, str], ...] = ()
    """``(session id, error text)`` for each item still unresolved."""

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.failures


def _quirks(values: Iterable[Quirk | str]) -> frozenset[Quirk]:
    return frozenset(Quirk(value) for value in values)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


_LossRecorder = Callable[[SandboxNotFound], Awaitable[None]]


_Event = TypeVar("_Event")


@attrs.define
class _Watched(Generic[_Event]):
    """A stream (exec events, file chunks) whose :class:`SandboxNotFound` records the loss."""

    events: AsyncIterator[_Event]
    on_lost: _LossRecorder

    def __aiter__(self) -> _Watched[_Event]:
        return self

    async def __anext__(self) -> _Event:
        try:
            return await self.events.__anext__()
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise


@attrs.define
class _SessionSandbox(SandboxWrapper):
    """The client SessionManager hands out.

    A :class:`SandboxNotFound` from any operation evicts the cached client and
    persists the loss before it propagates, so the next acquire (on any
    worker) fails as ``lost`` instead of trusting a dead client.
    """

    on_lost: _LossRecorder = attrs.field(kw_only=True)

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command``; a vanished resource is recorded as lost."""
        try:
            return await self.inner.exec(command)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    @asynccontextmanager
    async def exec_stream(self, command: Command) -> AsyncIterator[AsyncIterator[ExecEvent]]:
        """Stream ``command``'s output; a vanished resource is recorded as lost."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                events = await stack.enter_async_context(self.inner.exec_stream(command))
            except SandboxNotFound as exc:
                await self.on_lost(exc)
                raise
            yield _Watched(events, self.on_lost)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read ``path`` (bounded); a vanished resource is recorded as lost."""
        try:
            return await self.inner.read_file(path, max_bytes=max_bytes)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise

    @asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``path``; a vanished resource is recorded as lost."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(self.inner.open_file(path))
            except SandboxNotFound as exc:
                await self.on_lost(exc)
                raise
            yield _Watched(chunks, self.on_lost)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``path``; a vanished resource is recorded as lost."""
        try:
            await self.inner.write_file(path, data)
        except SandboxNotFound as exc:
            await self.on_lost(exc)
            raise


@attrs.define
class _Cached:
    raw: Sandbox
    """The provider's client, used for keep-alive."""
    sandbox: _SessionSandbox
    """What callers receive."""
    spec_hash: str
    session_created_at: datetime
    """Creation time of the Session row the client was cached for: a Session
    deleted and re-created elsewhere under the same id never reuses it."""
    network_hosts: tuple[str, ...] | None = None
    """The final allowlist last applied through this client (limited network only)."""
    keep_alive: KeepAliveSandbox | None = None
    """``raw`` if it implements keep-alive: checked once here, not on every acquire
    (a runtime protocol check costs more than the rest of a cached acquire)."""


@attrs.define
class _Operation:
    """One lifecycle command on one Session: what was observed and what effects produced."""

    session_id: str
    command: LifecycleCommand
    spec: SandboxSpec
    record: SessionRecord | None = None
    cached: _Cached | None = None
    binding: Binding | None = None
    intent: ProvisioningIntent | None = None
    intent_adopted: bool = False
    created: Sandbox | None = None
    result: Sandbox | None = None
    lost_ref: SandboxRef | None = None
    lost_cause: SandboxNotFound | None = None
    deleted: bool = False
    force: bool = False
    """A forced deletion: purge by the provider's names, drop refused bindings."""


class _Reobserve(Exception):
    """The rows changed under the operation (another worker won): observe again."""


@attrs.define
class _SessionLocks:
    """Per-Session asyncio locks, dropped when the last user leaves."""

    _locks: dict[str, tuple[asyncio.Lock, int]] = attrs.field(factory=dict, alias="_locks")

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


@attrs.define
class SessionManager:
    """One logical sandbox per Session, durable across worker restarts.

    ``capabilities`` are the provider's *declared* capabilities (from its
    registration); they default to what the provider reports. ``quirks`` are
    the contract deviations its registration declares. ``package_manager_hosts``
    (deployment configuration, ``MANGO_PACKAGE_MANAGER_HOSTS``) join a
    limited-network sandbox's allowlist while its packages are installed.

    Every public operation accepts ``deadline``: an absolute time on the
    running loop's clock (:func:`mango.domain.deadline.deadline_in` makes one
    from seconds). Maintenance inside the operation (package setup, a
    provider's resume) is bounded by what remains of it.
    """

    provider: Provider
    store: BindingStore
    capabilities: CapabilitySet | None = None
    quirks: frozenset[Quirk] = attrs.field(default=frozenset(), converter=_quirks)
    package_manager_hosts: tuple[str, ...] = attrs.field(
        default=(), kw_only=True, converter=_str_tuple
    )
    _cache: dict[str, _Cached] = attrs.field(factory=dict, alias="_cache")
    _locks: _SessionLocks = attrs.field(factory=_SessionLocks, alias="_locks")

    @property
    def _declared(self) -> CapabilitySet:
        return self.capabilities if self.capabilities is not None else self.provider.capabilities

    # ------------------------------------------------------------------ public API

    async def ensure_session(self, session_id: str) -> None:
        """Create the Session row if absent; a fenced Session raises :class:`SessionDeleting`."""
        record = await self.store.ensure_session(validate_session_id(session_id))
        if record.deleting:
            raise SessionDeleting(
                f"session {session_id!r} is being deleted",
                hint="wait for the deletion to finish, then use a new session id",
            )

    def admit(self, spec: SandboxSpec, resources: tuple[Capability, ...] = ()) -> None:
        """Raise if ``spec`` cannot run on this provider (every reason listed)."""
        admit(self.provider.name, self._declared, spec, resources)

    async def observe(self, session_id: str) -> LifecycleState:
        """The Session's lifecycle state as the store records it (no provider call)."""
        validate_session_id(session_id)
        return await self._observe(_Operation(session_id, _C.DELETE, SandboxSpec()), cache=False)

    async def acquire(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> Sandbox:
        """Return the Session's sandbox, provisioning it on first use.

        Raises :class:`SandboxNotFound` if the bound resource is gone (the loss
        is persisted; never an empty replacement), :class:`SessionDeleting` if
        the Session is fenced, :class:`AdmissionRejected` if the spec cannot
        run here.
        """
        validate_session_id(session_id)
        self.admit(spec)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                op = await self._run(_Operation(session_id, _C.ACQUIRE, spec))
        if op.result is None:  # pragma: no cover - the table ends every acquire bound or failed
            raise MangoError(f"acquiring session {session_id!r} produced no sandbox")
        return op.result

    async def acquire_existing(
        self, session_id: str, spec: SandboxSpec, *, deadline: float | None = None
    ) -> Sandbox | None:
        """Return the Session's bound sandbox, or None; never provisions."""
        validate_session_id(session_id)
        self.admit(spec)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                op = await self._run(_Operation(session_id, _C.ACQUIRE_EXISTING, spec))
        return op.result

    async def release(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> None:
        """Fence the Session and tear its sandbox down; idempotent.

        Never creates or attaches: the bound reference (or, for an intent-only
        Session, what ``Provider.find`` reports) is removed with
        ``Provider.destroy``; with no binding left, a purging provider also
        purges what it holds under the Session's names. If destroy fails the
        binding is kept so a retry can finish. A lost reference counts as
        already destroyed.

        ``force``: for an operator whose Session cannot be deleted because
        the provider's records were damaged. The provider purges whatever it
        owns under the Session's deterministic names without trusting those
        records, and a bound resource it refuses as another owner's
        (:class:`OwnershipError`) is left alone and its binding dropped.
        Transient failures still fail (nothing is forced past a backend that
        cannot answer). A Session
        bound to (or being provisioned by) another provider is refused with
        :class:`OwnershipError` before anything changes: it is not fenced.
        """
        validate_session_id(session_id)
        with deadline_scope(deadline):
            async with self._locks.hold(session_id):
                await self._refuse_foreign(session_id)
                await self._run(_Operation(session_id, _C.DELETE, SandboxSpec(), force=force))

    async def _refuse_foreign(self, session_id: str) -> None:
        """Raise :class:`OwnershipError` if another provider's binding or intent holds the Session.

        Checked before the fence: a command run with the wrong provider
        selected must leave the Session as it found it, not fenced and stuck
        until the right provider's worker comes along.
        """
        binding = await self.store.get_binding(session_id)
        if binding is not None:
            self._require_own(session_id, binding.ref.provider, "delete")
            return
        intent = await self.store.get_intent(session_id)
        if intent is not None:
            self._require_own(session_id, intent.provider, "delete")

    async def delete_session(
        self, session_id: str, *, deadline: float | None = None, force: bool = False
    ) -> bool:
        """Release the sandbox and delete the Session row; False if it was already gone.

        ``force`` as for :meth:`release`.
        """
        await self.release(session_id, deadline=deadline, force=force)
        async with self._locks.hold(session_id):
            op = _Operation(session_id, _C.DELETION_FINISHED, SandboxSpec())
            record = await self.store.get_session(session_id)
            # Our own release fenced it: a row that is gone now was deleted, not never made.
            fenced = record is None or record.deleting
            state = observe(
                session_exists=record is not None,
                fenced=fenced,
                has_intent=False,
                has_binding=False,
            )
            await self._drive(op, state)
        return op.deleted

    async def reconcile_provisioning(
        self, limit: int = 100, *, deadline: float | None = None
    ) -> ReconcileReport:
        """Finish or destroy what a crash left between intent and binding.

        Every listed intent of this provider is attempted even if some fail.
        """
        intents = await self.store.list_intents(self.provider.name, limit)

        async def settle(intent: ProvisioningIntent) -> None:
            if intent.deleting:
                await self.release(intent.session_id, deadline=deadline)
            else:
                await self.acquire(intent.session_id, intent.spec, deadline=deadline)
            if await self.store.get_intent(intent.session_id) is not None:
                raise MangoError(f"intent of session {intent.session_id!r} remains unresolved")

        return await _attempt_each("reconcile", [(i.session_id, i) for i in intents], settle)

    async def finish_deletions(
        self, limit: int = 100, *, deadline: float | None = None
    ) -> ReconcileReport:
        """Finish deletions that were fenced but not completed (after a crash)."""
        records = await self.store.list_deleting_sessions(limit)

        async def finish(record: SessionRecord) -> None:
            await self.delete_session(record.session_id, deadline=deadline)

        return await _attempt_each(
            "finish deletion of", [(r.session_id, r) for r in records], finish
        )

    async def aclose(self) -> None:
        """Forget cached clients and close the provider's connections."""
        self._cache.clear()
        await self.provider.aclose()

    # ------------------------------------------------------------------ the machine

    async def _observe(self, op: _Operation, *, cache: bool = True) -> LifecycleState:
        """Read the rows that decide the state, filling ``op`` with what was read."""
        op.record = record = await self.store.get_session(op.session_id)
        op.cached = op.binding = op.intent = None
        op.intent_adopted = False
        cached = self._cache.get(op.session_id)
        if cached is not None and (
            record is None or record.deleting or cached.session_created_at != record.created_at
        ):
            # The fence (or a re-created Session) is read on every call, so a
            # fence set by another process is honoured at once.
            del self._cache[op.session_id]
            cached = None
        if record is None or record.deleting:
            # Neither an intent nor a binding changes a deleting or absent Session's state.
            return observe(
                session_exists=record is not None,
                fenced=False if record is None else record.deleting,
                has_intent=False,
                has_binding=False,
            )
        if cache and cached is not None:
            # A client cached for this very Session row stands for its binding:
            # later turns cost one read, not three.
            op.cached = cached
            return observe(session_exists=True, fenced=False, has_intent=False, has_binding=True)
        op.binding = await self.store.get_binding(op.session_id)
        if op.binding is None:
            op.intent = await self.store.get_intent(op.session_id)
        return observe(
            session_exists=True,
            fenced=False,
            has_intent=op.intent is not None,
            has_binding=op.binding is not None,
            binding_lost=op.binding is not None and op.binding.lost,
        )

    async def _run(self, op: _Operation) -> _Operation:
        """Observe, then drive ``op.command`` through the table; re-observe if rows moved."""
        for _ in range(_MAX_REOBSERVE):
            state = await self._observe(op)
            try:
                await self._drive(op, state)
            except _Reobserve:
                continue
            return op
        raise MangoError(
            f"session {op.session_id!r} kept changing while {op.command.value} ran; try again"
        )

    async def _drive(self, op: _Operation, state: LifecycleState) -> LifecycleState:
        """Apply ``op.command`` and every follow-up a handler reports, effect by effect."""
        pending = [op.command]
        while pending:
            command = pending.pop(0)
            try:
                step = transition(state, command)
            except InvalidTransition:
                if state is _S.DELETING:
                    # A fenced Session admits no new work, even on a sandbox that still exists.
                    raise SessionDeleting(
                        f"session {op.session_id!r} is being deleted; it admits no new work"
                    ) from None
                raise
            for effect in step.effects:
                follow_ups = await _HANDLERS[effect](self, op)
                if follow_ups:
                    # What the effect found (ready, lost) decides what happens next.
                    pending[:0] = follow_ups
                    break
            state = step.state
        return state

    # ------------------------------------------------------------------ effects

    async def _persist_intent(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        intent = ProvisioningIntent(
            session_id=op.session_id,
            provider=self.provider.name,
            spec=op.spec,
            spec_hash=spec_hash(op.spec),
        )
        try:
            op.intent = await self.store.put_intent(intent)
        except ProvisioningBlocked:
            if await self.store.get_binding(op.session_id) is not None:
                raise _Reobserve from None  # another worker bound it first
            if await self.store.get_session(op.session_id) is None:
                raise InvalidInput(
                    f"session {op.session_id!r} does not exist",
                    hint="create the session before acquiring its sandbox",
                ) from None
            raise SessionDeleting(f"session {op.session_id!r} is being deleted") from None
        op.intent_adopted = False
        if op.record is None:  # created between our read and the intent
            op.record = await self.store.get_session(op.session_id)
        return ()

    def _adopt_intent(self, op: _Operation) -> None:
        """Check the stored intent against this worker and take its spec."""
        stored = op.intent
        if stored is None or op.intent_adopted:
            return
        if stored.provider != self.provider.name:
            raise OwnershipError(
                f"session {op.session_id!r} is being provisioned by provider "
                f"{stored.provider!r}, this worker runs {self.provider.name!r}",
                hint=f"run a worker with MANGO_SANDBOX={stored.provider} to finish it",
            )
        if not spec_hash_matches(stored.spec_hash, op.spec):
            raise PermanentError(
                f"session {op.session_id!r} is already being provisioned with another spec",
                hint="run 'mango reconcile' to finish it with the spec it started with",
            )
        op.spec = stored.spec  # the stored spec wins, so identity cannot drift
        op.intent_adopted = True

    async def _create_resource(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        self._adopt_intent(op)
        sandbox = await self.provider.create(op.session_id, op.spec)
        try:
            self._check_sandbox(sandbox)
        except OwnershipError:
            await self._best_effort_destroy(sandbox)
            raise
        op.created = sandbox
        return ()

    async def _setup_resource(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        sandbox = self._created(op)
        limited = op.spec.network is NetworkMode.LIMITED
        if not op.spec.packages.is_empty:
            if limited:
                # Widened only while packages install; tools never see this list.
                setup = {*op.spec.network_allowed_hosts, *op.spec.setup_network_allowed_hosts}
                setup.update(self.package_manager_hosts)
                await self._apply_network(op.session_id, sandbox, tuple(sorted(setup)))
            await install_packages(sandbox, op.spec)
        if limited:
            # Before the binding: a bound sandbox has its final policy.
            await self._apply_network(op.session_id, sandbox, op.spec.network_allowed_hosts)
        return (_C.RESOURCE_READY,)

    async def _apply_network(
        self, session_id: str, sandbox: Sandbox, hosts: tuple[str, ...]
    ) -> None:
        if not isinstance(sandbox, LimitedNetworkSandbox):
            raise CapabilityNotSupported(
                self.provider.name,
                [f"the sandbox of session {session_id!r} cannot restrict its network"],
            )
        await sandbox.apply_limited_network(hosts)

    async def _publish_binding(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        sandbox = self._created(op)
        proposed = Binding(
            session_id=op.session_id, ref=sandbox.ref, spec_hash=binding_spec_hash(op.spec)
        )
        winner = await self.store.put_binding(proposed)
        if winner.ref != proposed.ref:
            log.info("session %s: another worker won the binding; destroying ours", op.session_id)
            await self._best_effort_destroy(sandbox)
            raise _Reobserve
        record = op.record
        if record is None:  # pragma: no cover - the intent's foreign key guarantees the row
            raise MangoError(f"session {op.session_id!r} vanished while it was provisioned")
        op.result = self._remember(op.session_id, sandbox, winner.spec_hash, record)
        if op.spec.network is NetworkMode.LIMITED:
            self._cache[op.session_id].network_hosts = op.spec.network_allowed_hosts
        return ()

    async def _attach_resource(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        cached = op.cached
        if cached is not None:
            self._require_package_proof(op.session_id, cached.spec_hash, op.spec)
            handed_out = cached.sandbox
        else:
            binding, record = op.binding, op.record
            if binding is None or record is None:  # pragma: no cover - observed as bound
                raise MangoError(f"session {op.session_id!r} has no binding to attach")
            self._require_package_proof(op.session_id, binding.spec_hash, op.spec)
            self._require_own(op.session_id, binding.ref.provider, "use")
            try:
                raw = await self.provider.attach(op.session_id, binding.ref, op.spec)
            except SandboxNotFound as exc:
                return self._lost(op, binding.ref, exc)
            self._check_sandbox(raw)
            handed_out = self._remember(op.session_id, raw, binding.spec_hash, record)
            cached = self._cache[op.session_id]
        if cached.keep_alive is not None:
            try:
                await cached.keep_alive.keep_alive()
            except SandboxNotFound as exc:
                return self._lost(op, cached.raw.ref, exc)
        if (
            op.spec.network is NetworkMode.LIMITED
            and cached.network_hosts != op.spec.network_allowed_hosts
        ):
            # A fresh client (restart) or a changed allowlist: the provider
            # compares the applied policy and repairs any drift.
            try:
                await self._apply_network(op.session_id, cached.raw, op.spec.network_allowed_hosts)
            except SandboxNotFound as exc:
                return self._lost(op, cached.raw.ref, exc)
            cached.network_hosts = op.spec.network_allowed_hosts
        op.result = handed_out
        return ()

    def _lost(
        self, op: _Operation, ref: SandboxRef, exc: SandboxNotFound
    ) -> tuple[LifecycleCommand, ...]:
        self._forget(op.session_id, ref)
        op.lost_ref, op.lost_cause = ref, exc
        # Record the loss, then let the original command meet the lost state.
        return (_C.REFERENCE_LOST, op.command)

    async def _record_lost(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        ref = op.lost_ref or (op.binding.ref if op.binding is not None else None)
        if ref is not None:
            self._forget(op.session_id, ref)
            await self.store.mark_binding_lost(op.session_id, ref)
        return ()

    async def _fail_lost(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        ref = op.lost_ref or (op.binding.ref if op.binding is not None else None)
        raise SandboxNotFound(
            f"the sandbox of session {op.session_id!r} ({ref}) no longer exists; "
            "its workspace is lost and will not be replaced by an empty one",
            hint="delete the session (mango sessions delete) and start a new one",
        ) from op.lost_cause

    async def _fence_session(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        self._cache.pop(op.session_id, None)
        await self.store.fence_session(op.session_id)
        return ()

    async def _destroy_resource(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        try:
            return await self._teardown(op)
        except OwnershipError as exc:
            if exc.hint is not None:
                raise
            raise OwnershipError(
                str(exc),
                hint=f"if a command damaged the sandbox's records, 'mango sessions delete "
                f"--force {op.session_id}' removes what mango owns under the Session's names",
            ) from exc

    async def _teardown(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        # Re-read after the fence: from here on no worker can add an intent or a binding.
        op.binding = await self.store.get_binding(op.session_id)
        if op.binding is not None:
            self._require_own(op.session_id, op.binding.ref.provider, "delete")
            await self._destroy(op, op.binding.ref)
        else:
            op.intent = await self.store.get_intent(op.session_id)
            if op.intent is not None:
                self._require_own(op.session_id, op.intent.provider, "delete")
                # An intent-only Session may or may not have a resource (crash
                # before or after create): ask, never create one to find out.
                found = await self._find_for_deletion(op)
                if found is not None:
                    await self._destroy(op, found)
        if isinstance(self.provider, PurgingProvider) and (op.binding is None or op.force):
            # No binding left to say what exists (an intent-only Session, or
            # rows removed by an earlier pass that a crash cut short): the
            # provider removes whatever it still holds under the Session's
            # names before the row may go.
            await self.provider.purge(op.session_id, force=op.force)
        return ()

    async def _find_for_deletion(self, op: _Operation) -> SandboxRef | None:
        try:
            return await self.provider.find(op.session_id)
        except OwnershipError as exc:
            if not op.force:
                raise
            log.warning("session %s: forced deletion skips %s", op.session_id, exc)
            return None

    async def _destroy(self, op: _Operation, ref: SandboxRef) -> None:
        try:
            await self.provider.destroy(op.session_id, ref)
        except OwnershipError as exc:
            if not op.force:
                raise
            # Not this Session's to remove: a forced deletion forgets the row only.
            log.warning("session %s: forced deletion leaves %s alone: %s", op.session_id, ref, exc)

    async def _remove_binding(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        if op.binding is not None:
            await self.store.delete_binding(op.binding)
        return ()

    async def _remove_intent(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        intent = await self.store.get_intent(op.session_id)
        if intent is not None:
            self._require_own(op.session_id, intent.provider, "reconcile")
            await self.store.delete_intent(intent)
        return ()

    async def _delete_session(self, op: _Operation) -> tuple[LifecycleCommand, ...]:
        op.deleted = await self.store.delete_session(op.session_id)
        return ()

    # ------------------------------------------------------------------ helpers

    def _created(self, op: _Operation) -> Sandbox:
        if op.created is None:  # pragma: no cover - the table creates before setup and publish
            raise MangoError(f"session {op.session_id!r}: no resource was created")
        return op.created

    def _remember(
        self, session_id: str, raw: Sandbox, binding_hash: str, record: SessionRecord
    ) -> _SessionSandbox:
        handed_out = _SessionSandbox(raw, on_lost=self._loss_recorder(session_id, raw.ref))
        keep_alive = raw if isinstance(raw, KeepAliveSandbox) else None
        self._cache[session_id] = _Cached(
            raw, handed_out, binding_hash, record.created_at, keep_alive=keep_alive
        )
        return handed_out

    def _forget(self, session_id: str, ref: SandboxRef) -> None:
        cached = self._cache.get(session_id)
        if cached is not None and cached.raw.ref == ref:
            del self._cache[session_id]

    def _loss_recorder(self, session_id: str, ref: SandboxRef) -> _LossRecorder:
        async def record(exc: SandboxNotFound) -> None:
            self._forget(session_id, ref)
            op = _Operation(session_id, _C.REFERENCE_LOST, SandboxSpec(), lost_ref=ref)
            op.lost_cause = exc
            try:
                async with self._locks.hold(session_id):
                    state = await self._observe(op)
                    if op.binding is not None and op.binding.ref == ref:
                        await self._drive(op, state)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the caller must see SandboxNotFound itself
                log.warning("session %s: could not record the loss of %s: %s", session_id, ref, err)

        return record

    def _require_package_proof(self, session_id: str, binding_hash: str, spec: SandboxSpec) -> None:
        if not binding_proves_package_setup(binding_hash, spec):
            raise PermanentError(
                f"session {session_id!r} is bound to a sandbox set up with another package plan; "
                "packages are never re-installed on a live sandbox",
                hint="delete the session to start over with the new package plan",
            )

    def _require_own(self, session_id: str, provider: str, action: str) -> None:
        if provider != self.provider.name:
            raise OwnershipError(
                f"session {session_id!r} belongs to provider {provider!r}, "
                f"not to {self.provider.name!r} (the provider selected here)",
                hint=f"{action} it with MANGO_SANDBOX={provider} "
                "(on the durable path: in a worker of that provider)",
            )

    def _check_sandbox(self, sandbox: Sandbox) -> None:
        if sandbox.ref.provider != self.provider.name:
            raise OwnershipError(
                f"provider {self.provider.name!r} returned a sandbox of {sandbox.ref.provider!r}"
            )

    async def _best_effort_destroy(self, sandbox: Sandbox) -> None:
        try:
            await asyncio.shield(sandbox.destroy())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the loser's cleanup must not mask the result
            log.warning("could not destroy surplus sandbox %s: %s", sandbox.ref, exc)


_Handler = Callable[[SessionManager, _Operation], Awaitable[tuple[LifecycleCommand, ...]]]

_HANDLERS: Mapping[LifecycleEffect, _Handler] = {
    _E.PERSIST_INTENT: SessionManager._persist_intent,
    _E.CREATE_RESOURCE: SessionManager._create_resource,
    _E.SETUP_RESOURCE: SessionManager._setup_resource,
    _E.PUBLISH_BINDING: SessionManager._publish_binding,
    _E.ATTACH_RESOURCE: SessionManager._attach_resource,
    _E.RECORD_LOST: SessionManager._record_lost,
    _E.FAIL_LOST: SessionManager._fail_lost,
    _E.FENCE_SESSION: SessionManager._fence_session,
    _E.DESTROY_RESOURCE: SessionManager._destroy_resource,
    _E.REMOVE_BINDING: SessionManager._remove_binding,
    _E.REMOVE_INTENT: SessionManager._remove_intent,
    _E.DELETE_SESSION: SessionManager._delete_session,
}
"""Effect -> the method that performs it; every effect of the table has one."""


async def _attempt_each(
    what: str,
    items: list[tuple[str, _Item]],
    action: Callable[[_Item], Awaitable[None]],
) -> ReconcileReport:
    """Run ``action`` on every item; a failure is logged and reported, never stops the rest."""
    completed = 0
    failures: list[tuple[str, str]] = []
    for session_id, item in items:
        try:
            await action(item)
            completed += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - each failure is isolated and reported
            log.warning("%s %s failed: %s", what, session_id, exc)
            failures.append((session_id, f"{type(exc).__name__}: {exc}"))
    return ReconcileReport(len(items), completed, tuple(failures))
