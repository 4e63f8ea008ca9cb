"""SessionManager.processes: refused where undeclared, durable ids across managers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import CapabilityNotSupported, Command, SandboxSpec
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.sandbox_ports import ProcessState
from mango.local import LocalProvider

SPEC = SandboxSpec()


async def test_undeclared_is_refused_before_anything_is_provisioned(
    make_provider: Callable[..., Any], world: Any
) -> None:
    """A provider without background-processes: CapabilityNotSupported, no sandbox made."""
    manager = SessionManager(make_provider(), InMemoryBindingStore())
    await manager.ensure_session("s1")
    for provision in (True, False):
        with pytest.raises(CapabilityNotSupported) as refused:
            await manager.processes("s1", SPEC, provision=provision)
        assert refused.value.reasons == (
            "memory does not support background processes (background-processes)",
        )
        assert "mango providers" in (refused.value.hint or "")
    assert world.creates == 0


async def test_declared_but_not_implemented_is_refused(
    make_provider: Callable[..., Any],
) -> None:
    """A declaration whose sandbox lacks the protocol is refused too, never emulated."""
    declared = CapabilitySet(frozenset({Capability.BACKGROUND_PROCESSES}))
    manager = SessionManager(make_provider(capabilities=declared), InMemoryBindingStore())
    await manager.ensure_session("s1")
    with pytest.raises(CapabilityNotSupported, match="does not implement background processes"):
        await manager.processes("s1", SPEC)


async def test_a_process_started_through_one_manager_is_reached_through_another(
    tmp_path: Path,
) -> None:
    """Two managers (two workers) over one store and base: same id, same process."""
    store = InMemoryBindingStore()
    first = SessionManager(LocalProvider(tmp_path), store)
    await first.ensure_session("s1")
    assert await first.processes("s1", SPEC, provision=False) is None  # never provisions
    sandbox = await first.processes("s1", SPEC)
    assert sandbox is not None
    handle = await sandbox.start(Command(("cat",)))
    second = SessionManager(LocalProvider(tmp_path), store)
    other = await second.processes("s1", SPEC, provision=False)
    assert other is not None
    assert [info.id for info in await other.processes()] == [handle.id]
    assert (await other.kill(handle.id)).state is ProcessState.KILLED
    assert (await sandbox.wait(handle.id, timeout=5)).state is ProcessState.KILLED
    await first.delete_session("s1")
