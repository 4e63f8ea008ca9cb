"""Provisioning and attach effects: intent, create, setup, publish, attach, and loss.

Order on first use: intent (insert-if-absent) -> create (idempotent by
session key) -> [limited network: setup allowlist] -> package setup ->
[limited network: final allowlist] -> binding (insert-if-absent; the loser's
resource is destroyed and the winner's used). A failure leaves the intent,
never a binding, so a retry or the reconciler resumes. A limited-network
sandbox gets its final allowlist again whenever a client is attached (the
provider re-applies it only if the applied policy drifted), and a cached
client gets it when the spec's allowlist changes.

Each effect is an :class:`~mango.app.session_manager.context.EffectHandler`:
a frozen input gathered from the facts, and the outcomes it may report. What
follows an outcome (``ready`` -> publish, ``lost`` -> record and fail,
``outbid`` -> attach the winner) is the lifecycle table's business.
"""

from __future__ import annotations

import asyncio
import logging
from typing import NoReturn

import attrs

from mango.app.packages import install_packages
from mango.app.session_manager.clients import CachedClient
from mango.app.session_manager.context import (
    Attached,
    Bound,
    Created,
    Done,
    EffectHandler,
    Facts,
    IntentHeld,
    IntentInput,
    Lost,
    Outbid,
    Ports,
    Ready,
    StaleObservation,
    intent_input,
)
from mango.app.session_manager.guards import check_sandbox
from mango.domain.errors import (
    CapabilityNotSupported,
    InvalidInput,
    MangoError,
    OwnershipError,
    ProvisioningBlocked,
    SandboxNotFound,
    SessionDeleting,
)
from mango.domain.hashing import binding_spec_hash, spec_hash
from mango.domain.ports import LimitedNetworkSandbox, Provider, Sandbox
from mango.domain.values import (
    Binding,
    NetworkMode,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SessionRecord,
)

__all__ = [
    "ATTACH_RESOURCE",
    "CREATE_RESOURCE",
    "FAIL_LOST",
    "PERSIST_INTENT",
    "PUBLISH_BINDING",
    "RECORD_LOST",
    "SETUP_RESOURCE",
]

log = logging.getLogger("mango.app.session_manager")


def _need_record(facts: Facts) -> SessionRecord:
    record = facts.record
    if record is None:  # pragma: no cover - the intent's foreign key guarantees the row
        raise MangoError(f"session {facts.session_id!r} vanished while it was provisioned")
    return record


# ------------------------------------------------------------------ persist-intent


@attrs.frozen
class PersistInput:
    """The Session, the caller's spec, and the row observed (None if it was absent)."""

    session_id: str
    spec: SandboxSpec
    record: SessionRecord | None


async def persist_intent(ports: Ports, given: PersistInput) -> IntentHeld:
    """Write the intent before anything exists at the provider, so a crash leaves a trace."""
    session_id, store = given.session_id, ports.store
    proposed = ProvisioningIntent(
        session_id=session_id,
        provider=ports.provider.name,
        spec=given.spec,
        spec_hash=spec_hash(given.spec),
    )
    try:
        stored = await store.put_intent(proposed)
    except ProvisioningBlocked:
        if await store.get_binding(session_id) is not None:
            raise StaleObservation from None  # another worker bound it first
        if await store.get_session(session_id) is None:
            raise InvalidInput(
                f"session {session_id!r} does not exist",
                hint="create the session before acquiring its sandbox",
            ) from None
        raise SessionDeleting(f"session {session_id!r} is being deleted") from None
    if (stored.provider, stored.spec_hash) != (proposed.provider, proposed.spec_hash):
        # Another worker's intent appeared since the observation: resume it
        # through the table, whose guards check its provider and spec.
        raise StaleObservation
    record = given.record if given.record is not None else await store.get_session(session_id)
    if record is None:  # pragma: no cover - the intent's foreign key guarantees the row
        raise MangoError(f"session {session_id!r} vanished while its intent was written")
    return IntentHeld(stored, record)


PERSIST_INTENT = EffectHandler(
    gather=lambda facts: PersistInput(facts.session_id, facts.operation.spec, facts.record),
    perform=persist_intent,
    outcomes=(IntentHeld,),
)


# ------------------------------------------------------------------ create-resource


async def create_resource(ports: Ports, given: IntentInput) -> Created:
    """Create (or find, by session key) the resource for the intent's own spec."""
    spec = given.intent.spec
    sandbox = await ports.provider.create(given.session_id, spec)
    try:
        check_sandbox(ports.provider, sandbox)
    except OwnershipError:
        await best_effort_destroy(sandbox)
        raise
    return Created(sandbox, spec)


CREATE_RESOURCE = EffectHandler(gather=intent_input, perform=create_resource, outcomes=(Created,))


# ------------------------------------------------------------------ setup-resource


@attrs.frozen
class SetupInput:
    """The created resource and the spec it is set up for."""

    session_id: str
    sandbox: Sandbox
    spec: SandboxSpec


def _setup_input(facts: Facts) -> SetupInput:
    created = facts.need(Created)
    return SetupInput(facts.session_id, created.sandbox, created.spec)


async def setup_resource(ports: Ports, given: SetupInput) -> Ready:
    """Install packages (under the setup allowlist), then apply the final network policy."""
    sandbox, spec = given.sandbox, given.spec
    limited = spec.network is NetworkMode.LIMITED
    if not spec.packages.is_empty:
        if limited:
            # Widened only while packages install; tools never see this list.
            setup = {*spec.network_allowed_hosts, *spec.setup_network_allowed_hosts}
            setup.update(ports.package_manager_hosts)
            await apply_network(ports.provider, given.session_id, sandbox, tuple(sorted(setup)))
        await install_packages(sandbox, spec)
    if limited:
        # Before the binding: a bound sandbox has its final policy.
        await apply_network(ports.provider, given.session_id, sandbox, spec.network_allowed_hosts)
    return Ready()


SETUP_RESOURCE = EffectHandler(gather=_setup_input, perform=setup_resource, outcomes=(Ready,))


# ------------------------------------------------------------------ publish-binding


@attrs.frozen
class PublishInput:
    """The set-up resource, its spec, and the Session row the client is cached for."""

    session_id: str
    sandbox: Sandbox
    spec: SandboxSpec
    record: SessionRecord


def _publish_input(facts: Facts) -> PublishInput:
    created = facts.need(Created)
    return PublishInput(facts.session_id, created.sandbox, created.spec, _need_record(facts))


async def publish_binding(ports: Ports, given: PublishInput) -> Bound | Outbid:
    """Propose the binding; the store elects one winner, and a loser destroys its resource."""
    proposed = Binding(
        session_id=given.session_id, ref=given.sandbox.ref, spec_hash=binding_spec_hash(given.spec)
    )
    winner = await ports.store.put_binding(proposed)
    if winner.ref != proposed.ref:
        log.info("session %s: another worker won the binding; destroying ours", given.session_id)
        await best_effort_destroy(given.sandbox)
        return Outbid(winner)
    entry = ports.clients.remember(given.session_id, given.sandbox, winner.spec_hash, given.record)
    if given.spec.network is NetworkMode.LIMITED:
        entry.network_hosts = given.spec.network_allowed_hosts
    return Bound(entry.sandbox)


PUBLISH_BINDING = EffectHandler(
    gather=_publish_input, perform=publish_binding, outcomes=(Bound, Outbid)
)


# ------------------------------------------------------------------ attach-resource


@attrs.frozen
class AttachInput:
    """The binding to attach (or the client cached for it), the spec, and the Session row."""

    session_id: str
    spec: SandboxSpec
    record: SessionRecord | None
    binding: Binding | None
    cached: CachedClient | None


def _attach_input(facts: Facts) -> AttachInput:
    return AttachInput(
        facts.session_id, facts.spec, facts.record, facts.binding, facts.observed.cached
    )


async def attach_resource(ports: Ports, given: AttachInput) -> Attached | Lost:
    """Attach by the binding (or take the cached client), keep it alive, enforce the network.

    A :class:`SandboxNotFound` from any of it is reported as :class:`Lost`.
    """
    session_id, spec, cached = given.session_id, given.spec, given.cached
    if cached is None:
        binding, record = given.binding, given.record
        if binding is None or record is None:  # pragma: no cover - observed as bound
            raise MangoError(f"session {session_id!r} has no binding to attach")
        try:
            raw = await ports.provider.attach(session_id, binding.ref, spec)
        except SandboxNotFound as exc:
            return _lost(ports, session_id, binding.ref, exc)
        check_sandbox(ports.provider, raw)
        cached = ports.clients.remember(session_id, raw, binding.spec_hash, record)
    if cached.keep_alive is not None:
        try:
            await cached.keep_alive.keep_alive()
        except SandboxNotFound as exc:
            return _lost(ports, session_id, cached.raw.ref, exc)
    hosts = spec.network_allowed_hosts
    if spec.network is NetworkMode.LIMITED and cached.network_hosts != hosts:
        # A fresh client (restart) or a changed allowlist: the provider
        # compares the applied policy and repairs any drift.
        try:
            await apply_network(ports.provider, session_id, cached.raw, hosts)
        except SandboxNotFound as exc:
            return _lost(ports, session_id, cached.raw.ref, exc)
        cached.network_hosts = hosts
    return Attached(cached.sandbox)


def _lost(ports: Ports, session_id: str, ref: SandboxRef, exc: SandboxNotFound) -> Lost:
    ports.clients.forget(session_id, ref)
    return Lost(ref, exc)


ATTACH_RESOURCE = EffectHandler(
    gather=_attach_input, perform=attach_resource, outcomes=(Attached, Lost)
)


# ------------------------------------------------------------------ record-lost, fail-lost


@attrs.frozen
class LossInput:
    """The reference reported lost (else the bound one) and what reported it."""

    session_id: str
    ref: SandboxRef | None
    cause: SandboxNotFound | None


def _loss_input(facts: Facts) -> LossInput:
    lost, binding = facts.lost, facts.binding
    if lost is not None:
        return LossInput(facts.session_id, lost.ref, lost.cause)
    return LossInput(facts.session_id, binding.ref if binding is not None else None, None)


async def record_lost(ports: Ports, given: LossInput) -> Done:
    """Persist the loss on the binding, so every worker sees ``lost`` without asking."""
    if given.ref is not None:
        ports.clients.forget(given.session_id, given.ref)
        await ports.store.mark_binding_lost(given.session_id, given.ref)
    return Done()


async def fail_lost(_ports: Ports, given: LossInput) -> NoReturn:
    """Refuse to hand out (or replace) a lost workspace."""
    raise SandboxNotFound(
        f"the sandbox of session {given.session_id!r} ({given.ref}) no longer exists; "
        "its workspace is lost and will not be replaced by an empty one",
        hint="delete the session (mango sessions delete) and start a new one",
    ) from given.cause


RECORD_LOST = EffectHandler(gather=_loss_input, perform=record_lost)
FAIL_LOST = EffectHandler(gather=_loss_input, perform=fail_lost, outcomes=())


# ------------------------------------------------------------------ helpers


async def apply_network(
    provider: Provider, session_id: str, sandbox: Sandbox, hosts: tuple[str, ...]
) -> None:
    """Restrict ``sandbox``'s egress to ``hosts``; a sandbox that cannot is refused."""
    if not isinstance(sandbox, LimitedNetworkSandbox):
        raise CapabilityNotSupported(
            provider.name, [f"the sandbox of session {session_id!r} cannot restrict its network"]
        )
    await sandbox.apply_limited_network(hosts)


async def best_effort_destroy(sandbox: Sandbox) -> None:
    """Destroy a surplus resource; a failure is logged, never masks the result."""
    try:
        await asyncio.shield(sandbox.destroy())
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the loser's cleanup must not mask the result
        log.warning("could not destroy surplus sandbox %s: %s", sandbox.ref, exc)
