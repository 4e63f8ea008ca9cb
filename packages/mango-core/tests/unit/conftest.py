"""Fakes for unit tests: an in-memory provider whose faults can be chosen."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import attrs
import pytest

from mango.domain import (
    CapabilitySet,
    Command,
    ExecResult,
    OwnershipError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    session_key_hash,
    validate_session_id,
)


@attrs.define
class World:
    """What exists 'at the provider', shared by every provider instance."""

    resources: dict[str, str] = attrs.field(factory=dict)  # external id -> owner key
    files: dict[str, dict[str, bytes]] = attrs.field(factory=dict)
    creates: int = 0
    destroys: int = 0
    counter: itertools.count[int] = attrs.field(factory=itertools.count)


@attrs.define
class MemorySandbox:
    """A sandbox that lives in a :class:`World`."""

    world: World
    ref: SandboxRef
    fail_destroy: bool = False
    root: str = "/workspace"

    async def exec(self, command: Command) -> ExecResult:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")
        return ExecResult(stdout=" ".join(command.argv).encode())

    async def read_file(self, path: str) -> bytes:
        return self.world.files[self.ref.external_id][path]

    async def write_file(self, path: str, data: bytes) -> None:
        self.world.files[self.ref.external_id][path] = data

    async def destroy(self) -> None:
        if self.fail_destroy:
            raise RuntimeError("destroy failed (injected)")
        if self.world.resources.pop(self.ref.external_id, None) is not None:
            self.world.destroys += 1
        self.world.files.pop(self.ref.external_id, None)


@attrs.define
class MemoryProvider:
    """A provider over a :class:`World`; ``idempotent=False`` makes create duplicate."""

    world: World
    idempotent: bool = True
    fail_destroy: bool = False
    name: str = "memory"
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet)
    attaches: int = 0

    def _id(self, key: str) -> str:
        if self.idempotent:
            return "res-" + session_key_hash(key)
        return f"res-{session_key_hash(key)}-{next(self.world.counter)}"

    async def create(self, session_key: str, spec: SandboxSpec) -> MemorySandbox:
        validate_session_id(session_key)
        external_id = self._id(session_key)
        if external_id not in self.world.resources:
            self.world.resources[external_id] = session_key
            self.world.files[external_id] = {}
            self.world.creates += 1
        return MemorySandbox(self.world, SandboxRef(self.name, external_id), self.fail_destroy)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> MemorySandbox:
        self.attaches += 1
        if ref.provider != self.name:
            raise OwnershipError(f"{ref} is not a {self.name} reference")
        owner = self.world.resources.get(ref.external_id)
        if owner is None:
            raise SandboxNotFound(f"{ref} does not exist")
        if owner != session_key:
            raise OwnershipError(f"{ref} belongs to another session")
        return MemorySandbox(self.world, ref, self.fail_destroy)

    async def aclose(self) -> None:
        return None


@pytest.fixture
def world() -> World:
    """A fresh provider world."""
    return World()


@pytest.fixture
def make_provider(world: World) -> Callable[..., MemoryProvider]:
    """Build providers over the shared world (each one a 'fresh worker')."""

    def make(**kwargs: object) -> MemoryProvider:
        return MemoryProvider(world, **kwargs)  # type: ignore[arg-type]

    return make
