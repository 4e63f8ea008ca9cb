"""Pinned skills through SessionManager on the in-memory provider fake and real PostgreSQL.

No daemon: the fake's sandboxes are not SkillBundleSandboxes, which is what
a provider that declares the capability but hands out the wrong sandboxes
looks like to the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.app.skills import SessionSkills
from mango.domain import CapabilitySet, SandboxSpec
from mango.domain.capabilities import Capability
from mango.domain.errors import CapabilityNotSupported
from mango.domain.files import FileStore
from mango.postgres import PostgresBindingStore, PostgresSkillCatalog

from .helpers import skill_tree

pytestmark = pytest.mark.postgres


async def test_the_worker_refuses_a_sandbox_without_the_protocol_and_deletion_drops_pins(
    store: PostgresBindingStore,
    blobs: FileStore,
    make_provider: Callable[..., object],
    tmp_path: Path,
) -> None:
    """Declared but not implemented: the step fails permanently; deleting still works."""
    skills = SessionSkills(PostgresSkillCatalog(store.pool), blobs, "test")
    provider = make_provider(capabilities=CapabilitySet.of(Capability.SKILL_BUNDLES))
    manager = SessionManager(provider, store, skills=skills)  # type: ignore[arg-type]
    version = await skills.add(skill_tree(tmp_path))
    await manager.create_session("claims", skills=[str(version.ref)])
    await manager.acquire("claims", SandboxSpec())
    with pytest.raises(CapabilityNotSupported, match="skill bundle mounts"):
        await manager.materialize("claims", SandboxSpec())
    assert await manager.delete_session("claims")
    assert await skills.session_skills("claims") == ()
    assert await store.get_session("claims") is None
    assert (await manager.create_session("plain")).created
    await manager.acquire("plain", SandboxSpec())
    assert (await manager.materialize_skills("plain", SandboxSpec())).imported == 0
