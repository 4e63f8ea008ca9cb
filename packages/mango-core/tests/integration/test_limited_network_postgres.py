"""The limited-network order through SessionManager, on the real PostgreSQL store.

setup allowlist -> package setup -> final allowlist -> binding; on attach the
final allowlist again (the provider repairs drift). The provider here is the
in-memory provider below, whose sandbox records every network
apply and every command in one ordered log; the store is wrapped only to put
its ``put_binding`` into the same log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from mango.app import SessionManager
from mango.domain import (
    AdmissionRejected,
    Capability,
    CapabilityNotSupported,
    CapabilitySet,
    Command,
    ExecResult,
    InvalidInput,
    NetworkMode,
    PackagePlan,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    session_key_hash,
)
from mango.domain.ports import LimitedNetworkSandbox
from mango.postgres import PostgresBindingStore

pytestmark = pytest.mark.postgres

LIMITED = CapabilitySet.of(Capability.LIMITED_NETWORK, Capability.PACKAGE_SETUP)
PACKAGE_HOSTS = ("mirror.example.test", "pkgs.example.test")


@attrs.define
class NetworkWorld:
    """What exists at the provider: resources (id -> key), their applied allowlists, one log."""

    resources: dict[str, str] = attrs.field(factory=dict)
    policies: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    log: list[str] = attrs.field(factory=list)


@attrs.define
class LimitedSandbox:
    """A sandbox with an allowlist; it re-applies only when the applied one differs."""

    world: NetworkWorld
    ref: SandboxRef
    root: str = "/workspace"

    async def exec(self, command: Command) -> ExecResult:
        self.world.log.append("exec " + " ".join(command.argv[:2]))
        return ExecResult()

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        raise NotImplementedError

    def open_file(self, path: str) -> Any:
        raise NotImplementedError

    async def write_file(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def exec_stream(self, command: Command) -> Any:
        raise NotImplementedError

    async def destroy(self) -> None:
        self.world.resources.pop(self.ref.external_id, None)

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        wanted = tuple(allowed_hosts)
        if self.world.policies.get(self.ref.external_id) == wanted:
            self.world.log.append("network unchanged")
            return
        self.world.policies[self.ref.external_id] = wanted
        self.world.log.append("network " + ",".join(wanted))


@attrs.define
class LimitedProvider:
    """One resource per key over a :class:`NetworkWorld`, handing out :class:`LimitedSandbox`."""

    world: NetworkWorld
    name: str = "memory"
    capabilities: CapabilitySet = attrs.field(factory=lambda: LIMITED)

    async def create(self, session_key: str, spec: SandboxSpec) -> LimitedSandbox:
        external_id = "res-" + session_key_hash(session_key)
        self.world.resources.setdefault(external_id, session_key)
        return LimitedSandbox(self.world, SandboxRef(self.name, external_id))

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> LimitedSandbox:
        if self.world.resources.get(ref.external_id) != session_key:
            raise SandboxNotFound(f"{ref} does not exist")
        return LimitedSandbox(self.world, ref)

    async def find(self, session_key: str) -> SandboxRef | None:
        external_id = "res-" + session_key_hash(session_key)
        return SandboxRef(self.name, external_id) if external_id in self.world.resources else None

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        self.world.resources.pop(ref.external_id, None)

    async def list_owned(self) -> list[Any]:
        return []

    async def health(self) -> str:
        return "memory"

    async def aclose(self) -> None:
        return None


@attrs.define
class LoggingStore:
    """The real store; ``put_binding`` is written to the world's log first."""

    inner: PostgresBindingStore
    log: list[str]

    async def put_binding(self, binding: Any) -> Any:
        self.log.append("bind")
        return await self.inner.put_binding(binding)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _manager(world: NetworkWorld, store: PostgresBindingStore) -> SessionManager:
    return SessionManager(
        LimitedProvider(world),
        LoggingStore(store, world.log),  # type: ignore[arg-type]
        LIMITED,
        package_manager_hosts=PACKAGE_HOSTS,
    )


SPEC = SandboxSpec(
    timeout=30,
    network=NetworkMode.LIMITED,
    network_allowed_hosts=("api.example.test",),
    setup_network_allowed_hosts=("extra.example.test",),
    packages=PackagePlan(apt=("curl",)),
)


async def test_provisioning_order_setup_packages_final_bind(
    store: PostgresBindingStore,
) -> None:
    """Setup allowlist (with the deployment's package hosts), packages, final list, binding."""
    world = NetworkWorld()
    manager = _manager(world, store)
    await manager.ensure_session("net-order")
    sandbox = await manager.acquire("net-order", SPEC)
    assert world.log == [
        "network api.example.test,extra.example.test,mirror.example.test,pkgs.example.test",
        "exec apt-get update",
        "exec apt-get install",
        "network api.example.test",
        "bind",
    ]
    assert world.policies[sandbox.ref.external_id] == ("api.example.test",)
    binding = await store.get_binding("net-order")
    assert binding is not None
    assert binding.ref == sandbox.ref

    # A cached client with the same allowlist: no network call at all.
    world.log.clear()
    await manager.acquire("net-order", SPEC)
    assert world.log == []


async def test_without_packages_only_the_final_list_is_applied(
    store: PostgresBindingStore,
) -> None:
    """No package setup: the sandbox never sees a widened list, only the final one."""
    world = NetworkWorld()
    manager = _manager(world, store)
    await manager.ensure_session("net-plain")
    spec = attrs.evolve(SPEC, packages=PackagePlan())
    await manager.acquire("net-plain", spec)
    assert world.log == ["network api.example.test", "bind"]


async def test_attach_reapplies_and_repairs_drift(store: PostgresBindingStore) -> None:
    """A restarted worker re-applies the final list; drift behind mango's back is repaired."""
    world = NetworkWorld()
    first = _manager(world, store)
    await first.ensure_session("net-drift")
    sandbox = await first.acquire("net-drift", SPEC)
    external_id = sandbox.ref.external_id

    # Unchanged policy, fresh worker: the provider is asked and finds nothing to do.
    world.log.clear()
    await _manager(world, store).acquire("net-drift", SPEC)
    assert world.log == ["network unchanged"]

    # Someone widened the policy behind mango's back; the next attach puts it back.
    world.policies[external_id] = ("api.example.test", "evil.example.test")
    world.log.clear()
    restarted = _manager(world, store)
    await restarted.acquire("net-drift", SPEC)
    assert world.log == ["network api.example.test"]
    assert world.policies[external_id] == ("api.example.test",)

    # A network-only change keeps the package proof and reaches the cached client.
    changed = attrs.evolve(SPEC, network_allowed_hosts=("api.example.test", "b.example.test"))
    world.log.clear()
    await restarted.acquire("net-drift", changed)
    assert world.log == ["network api.example.test,b.example.test"]


async def test_admission_rejects_allowlists_elsewhere(store: PostgresBindingStore) -> None:
    """An allowlist needs limited networking, and limited networking needs the capability."""
    world = NetworkWorld()
    plain = SessionManager(LimitedProvider(world, capabilities=CapabilitySet()), store)
    with pytest.raises(CapabilityNotSupported):
        plain.admit(SPEC)
    with pytest.raises(AdmissionRejected):
        _manager(world, store).admit(
            SandboxSpec(network=NetworkMode.BRIDGE, network_allowed_hosts=("a.example.test",))
        )
    with pytest.raises(InvalidInput):
        SandboxSpec(network=NetworkMode.LIMITED, network_allowed_hosts=("https://a.example",))
    assert isinstance(LimitedSandbox(world, SandboxRef("memory", "res-x")), LimitedNetworkSandbox)
    # Nothing was written for a rejected spec.
    assert await store.get_intent("never") is None
