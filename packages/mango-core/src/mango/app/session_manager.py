"""SessionManager: exactly one durable sandbox per Session.

The BindingStore is the source of truth; the in-process map is only a cache
of live clients. Operations on one Session are serialised inside the process;
across processes the database elects one winner. The lifecycle state machine
(:mod:`mango.domain.lifecycle`) decides which effects each operation performs.

Provisioning order: intent (insert-if-absent) -> create (idempotent by
session key) -> package setup -> binding (insert-if-absent; the loser's
resource is destroyed). A failure leaves the intent, never a binding, so a
retry or :meth:`SessionManager.reconcile_provisioning` resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import datetime
from typing import TypeVar

import attrs

from mango.app.packages import install_packages
from mango.domain.capabilities import Capability, CapabilitySet, admit
from mango.domain.errors import (
    InvalidInput,
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
    transition,
)
from mango.domain.ports import BindingStore, Provider, Sandbox
from mango.domain.values import (
    Binding,
    ProvisioningIntent,
    SandboxSpec,
    SessionRecord,
    validate_session_id,
)

__all__ = ["ReconcileReport", "SessionManager"]

log = logging.getLogger(__name__)
_Item = TypeVar("_Item")


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


@attrs.define
class _Cached:
    sandbox: Sandbox
    spec_hash: str
    session_created_at: datetime
    """Creation time of the Session row the client was cached for: a Session
    deleted and re-created elsewhere under the same id never reuses it."""


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
    registration); they default to what the provider reports.
    """

    provider: Provider
    store: BindingStore
    capabilities: CapabilitySet | None = None
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

    async def acquire(self, session_id: str, spec: SandboxSpec) -> Sandbox:
        """Return the Session's sandbox, provisioning it on first use.

        Raises :class:`SandboxNotFound` if the bound resource is gone (never an
        empty replacement), :class:`SessionDeleting` if the Session is fenced,
        :class:`AdmissionRejected` if the spec cannot run here.
        """
        validate_session_id(session_id)
        self.admit(spec)
        async with self._locks.hold(session_id):
            record = await self.store.get_session(session_id)
            found = await self._existing_locked(session_id, spec, record, LifecycleCommand.ACQUIRE)
            if found is not None:
                return found
            return await self._provision_locked(session_id, spec, record)

    async def acquire_existing(self, session_id: str, spec: SandboxSpec) -> Sandbox | None:
        """Return the Session's bound sandbox, or None; never provisions."""
        validate_session_id(session_id)
        self.admit(spec)
        async with self._locks.hold(session_id):
            record = await self.store.get_session(session_id)
            return await self._existing_locked(
                session_id, spec, record, LifecycleCommand.ACQUIRE_EXISTING
            )

    async def release(self, session_id: str) -> None:
        """Fence the Session and tear its sandbox down; idempotent.

        If destroy fails the binding is kept so a retry can finish. A lost
        reference counts as already destroyed.
        """
        validate_session_id(session_id)
        async with self._locks.hold(session_id):
            cached = self._cache.pop(session_id, None)
            effects = transition(LifecycleState.DELETING, LifecycleCommand.DELETE).effects
            for effect in effects:
                if effect is LifecycleEffect.FENCE_SESSION:
                    await self.store.fence_session(session_id)
                elif effect is LifecycleEffect.DESTROY_RESOURCE:
                    # Destroying, removing the binding and removing the intent
                    # depend on one another's outcome, so they run together.
                    await self._teardown_locked(session_id, cached)
                    break

    async def delete_session(self, session_id: str) -> bool:
        """Release the sandbox and delete the Session row; False if it was already gone."""
        await self.release(session_id)
        effects = transition(LifecycleState.DELETING, LifecycleCommand.DELETION_FINISHED).effects
        assert effects == (LifecycleEffect.DELETE_SESSION,)  # noqa: S101 - table invariant
        return await self.store.delete_session(session_id)

    async def reconcile_provisioning(self, limit: int = 100) -> ReconcileReport:
        """Finish or destroy what a crash left between intent and binding.

        Every listed intent of this provider is attempted even if some fail.
        """
        intents = await self.store.list_intents(self.provider.name, limit)

        async def settle(intent: ProvisioningIntent) -> None:
            if intent.deleting:
                await self.release(intent.session_id)
            else:
                await self.acquire(intent.session_id, intent.spec)
            if await self.store.get_intent(intent.session_id) is not None:
                raise MangoError(f"intent of session {intent.session_id!r} remains unresolved")

        return await _attempt_each("reconcile", [(i.session_id, i) for i in intents], settle)

    async def finish_deletions(self, limit: int = 100) -> ReconcileReport:
        """Finish deletions that were fenced but not completed (after a crash)."""
        records = await self.store.list_deleting_sessions(limit)

        async def finish(record: SessionRecord) -> None:
            await self.delete_session(record.session_id)

        return await _attempt_each(
            "finish deletion of", [(r.session_id, r) for r in records], finish
        )

    async def aclose(self) -> None:
        """Forget cached clients and close the provider's connections."""
        self._cache.clear()
        await self.provider.aclose()

    # ------------------------------------------------------------------ internals

    async def _existing_locked(
        self,
        session_id: str,
        spec: SandboxSpec,
        record: SessionRecord | None,
        command: LifecycleCommand,
    ) -> Sandbox | None:
        # The Session row is read on every call, cached client or not, so a
        # fence set by another process is honoured at once.
        if record is not None and record.deleting:
            self._cache.pop(session_id, None)
            # A fenced Session admits no new work, even on a sandbox that still exists.
            raise SessionDeleting(f"session {session_id!r} is being deleted; it admits no new work")
        cached = self._cache.pop(session_id, None)
        if (
            cached is not None
            and record is not None
            and cached.session_created_at == record.created_at
        ):
            self._require_package_proof(session_id, cached.spec_hash, spec)
            self._cache[session_id] = cached
            return cached.sandbox
        if record is None:
            return None
        binding = await self.store.get_binding(session_id)
        if binding is None:
            return None
        effects = transition(LifecycleState.BOUND, command).effects
        assert LifecycleEffect.ATTACH_RESOURCE in effects  # noqa: S101 - table invariant
        sandbox = await self._attach(binding, spec)
        self._cache[session_id] = _Cached(sandbox, binding.spec_hash, record.created_at)
        return sandbox

    def _require_package_proof(self, session_id: str, binding_hash: str, spec: SandboxSpec) -> None:
        if not binding_proves_package_setup(binding_hash, spec):
            raise PermanentError(
                f"session {session_id!r} is bound to a sandbox set up with another package plan; "
                "packages are never re-installed on a live sandbox",
                hint="delete the session to start over with the new package plan",
            )

    async def _attach(self, binding: Binding, spec: SandboxSpec) -> Sandbox:
        self._require_package_proof(binding.session_id, binding.spec_hash, spec)
        if binding.ref.provider != self.provider.name:
            raise OwnershipError(
                f"session {binding.session_id!r} is bound to provider {binding.ref.provider!r}, "
                f"this worker runs {self.provider.name!r}",
                hint=f"run a worker with MANGO_SANDBOX={binding.ref.provider} for this session",
            )
        try:
            sandbox = await self.provider.attach(binding.session_id, binding.ref, spec)
        except SandboxNotFound as exc:
            effects = transition(LifecycleState.LOST, LifecycleCommand.ACQUIRE).effects
            assert effects == (LifecycleEffect.FAIL_LOST,)  # noqa: S101 - table invariant
            raise SandboxNotFound(
                f"the sandbox of session {binding.session_id!r} ({binding.ref}) no longer exists; "
                "its workspace is lost and will not be replaced by an empty one",
                hint="delete the session (mango sessions delete) and start a new one",
            ) from exc
        self._check_sandbox(sandbox)
        return sandbox

    def _check_sandbox(self, sandbox: Sandbox) -> None:
        if sandbox.ref.provider != self.provider.name:
            raise OwnershipError(
                f"provider {self.provider.name!r} returned a sandbox of {sandbox.ref.provider!r}"
            )

    async def _provision_locked(
        self, session_id: str, spec: SandboxSpec, record: SessionRecord | None
    ) -> Sandbox:
        effects = transition(LifecycleState.UNBOUND, LifecycleCommand.ACQUIRE).effects
        intent = ProvisioningIntent(
            session_id=session_id,
            provider=self.provider.name,
            spec=spec,
            spec_hash=spec_hash(spec),
        )
        sandbox: Sandbox | None = None
        for effect in effects:
            if effect is LifecycleEffect.PERSIST_INTENT:
                try:
                    intent = await self._persist_intent(intent)
                except _AlreadyBound as won:
                    return won.sandbox
                if record is None:  # created between our read and the intent
                    record = await self.store.get_session(session_id)
                    assert record is not None  # noqa: S101 - the intent's FK guarantees it
                spec = intent.spec  # the stored spec wins, so identity cannot drift
            elif effect is LifecycleEffect.CREATE_RESOURCE:
                sandbox = await self._create(session_id, spec)
            elif effect is LifecycleEffect.SETUP_RESOURCE:
                assert sandbox is not None  # noqa: S101 - create precedes setup in the table
                if not spec.packages.is_empty:
                    await install_packages(sandbox, spec.packages)
        assert sandbox is not None  # noqa: S101 - the table always creates
        publish = transition(LifecycleState.PROVISIONING, LifecycleCommand.RESOURCE_READY)
        assert publish.effects == (LifecycleEffect.PUBLISH_BINDING,)  # noqa: S101
        assert record is not None  # noqa: S101 - set once the intent is stored
        return await self._publish(session_id, spec, sandbox, record)

    async def _persist_intent(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        try:
            stored = await self.store.put_intent(intent)
        except ProvisioningBlocked:
            binding = await self.store.get_binding(intent.session_id)
            if binding is not None:
                sandbox = await self._attach(binding, intent.spec)
                current = await self.store.get_session(intent.session_id)
                if current is not None:
                    self._cache[intent.session_id] = _Cached(
                        sandbox, binding.spec_hash, current.created_at
                    )
                raise _AlreadyBound(sandbox) from None
            record = await self.store.get_session(intent.session_id)
            if record is None:
                raise InvalidInput(
                    f"session {intent.session_id!r} does not exist",
                    hint="create the session before acquiring its sandbox",
                ) from None
            raise SessionDeleting(f"session {intent.session_id!r} is being deleted") from None
        if stored.provider != intent.provider:
            raise OwnershipError(
                f"session {intent.session_id!r} is being provisioned by provider "
                f"{stored.provider!r}, this worker runs {intent.provider!r}",
                hint=f"run a worker with MANGO_SANDBOX={stored.provider} to finish it",
            )
        if not spec_hash_matches(stored.spec_hash, intent.spec):
            raise PermanentError(
                f"session {intent.session_id!r} is already being provisioned with another spec",
                hint="run 'mango reconcile' to finish it with the spec it started with",
            )
        return stored

    async def _create(self, session_id: str, spec: SandboxSpec) -> Sandbox:
        sandbox = await self.provider.create(session_id, spec)
        try:
            self._check_sandbox(sandbox)
        except OwnershipError:
            await self._best_effort_destroy(sandbox)
            raise
        return sandbox

    async def _publish(
        self, session_id: str, spec: SandboxSpec, sandbox: Sandbox, record: SessionRecord
    ) -> Sandbox:
        proposed = Binding(
            session_id=session_id, ref=sandbox.ref, spec_hash=binding_spec_hash(spec)
        )
        winner = await self.store.put_binding(proposed)
        if winner.ref != proposed.ref:
            log.info("session %s: another worker won the binding; destroying ours", session_id)
            await self._best_effort_destroy(sandbox)
            sandbox = await self._attach(winner, spec)
        self._cache[session_id] = _Cached(sandbox, winner.spec_hash, record.created_at)
        return sandbox

    async def _best_effort_destroy(self, sandbox: Sandbox) -> None:
        try:
            await asyncio.shield(sandbox.destroy())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the loser's cleanup must not mask the result
            log.warning("could not destroy surplus sandbox %s: %s", sandbox.ref, exc)

    async def _teardown_locked(self, session_id: str, cached: _Cached | None) -> None:
        binding = await self.store.get_binding(session_id)
        if binding is not None:
            if binding.ref.provider != self.provider.name:
                raise OwnershipError(
                    f"session {session_id!r} is bound to provider {binding.ref.provider!r}, "
                    f"this worker runs {self.provider.name!r}",
                    hint=f"run a worker with MANGO_SANDBOX={binding.ref.provider} to delete it",
                )
            sandbox = cached.sandbox if cached is not None else None
            if sandbox is None:
                try:
                    sandbox = await self.provider.attach(session_id, binding.ref, SandboxSpec())
                except SandboxNotFound:
                    sandbox = None
            if sandbox is not None:
                with suppress(SandboxNotFound):
                    await sandbox.destroy()
            await self.store.delete_binding(binding)
            await self._clear_intent(session_id)
            return
        intent = await self.store.get_intent(session_id)
        if intent is None:
            if cached is not None:
                with suppress(SandboxNotFound):
                    await cached.sandbox.destroy()
            return
        if intent.provider != self.provider.name:
            raise OwnershipError(
                f"session {session_id!r} has a provisioning intent of provider "
                f"{intent.provider!r}, this worker runs {self.provider.name!r}",
                hint=f"run a worker with MANGO_SANDBOX={intent.provider} to delete it",
            )
        # Create is idempotent by session key: it recovers a resource created
        # before the crash (or makes an empty one) so it can be destroyed.
        sandbox = await self.provider.create(session_id, intent.spec)
        with suppress(SandboxNotFound):
            await sandbox.destroy()
        await self.store.delete_intent(intent)

    async def _clear_intent(self, session_id: str) -> None:
        intent = await self.store.get_intent(session_id)
        if intent is None:
            return
        if intent.provider != self.provider.name:
            raise OwnershipError(
                f"session {session_id!r} still has a provisioning intent of provider "
                f"{intent.provider!r}; only a worker of that provider can reconcile it"
            )
        await self.store.delete_intent(intent)


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


class _AlreadyBound(Exception):
    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__("already bound")
        self.sandbox = sandbox
