"""The file API through SessionManager's client: declared, refused, losses recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore, SessionManager, SessionSandbox
from mango.domain import CapabilityNotSupported, LifecycleState, SandboxNotFound, SandboxSpec
from mango.domain.capabilities import CapabilitySet
from mango.domain.sandbox_ports import FileKind
from mango.local import LocalProvider

SPEC = SandboxSpec()


async def _acquired(tmp_path: Path, **options: object) -> tuple[SessionManager, SessionSandbox]:
    manager = SessionManager(
        LocalProvider(tmp_path / "sandboxes"), InMemoryBindingStore(), **options
    )  # type: ignore[arg-type]
    await manager.ensure_session("s1")
    return manager, await manager.acquire("s1", SPEC)


async def test_every_operation_reaches_the_sandbox(tmp_path: Path) -> None:
    """make_dir, rename, stat, exists, list_dir and remove through the handed-out client."""
    _manager, sandbox = await _acquired(tmp_path)
    await sandbox.make_dir("a/b")
    await sandbox.write_file("a/b/f.txt", b"12")
    await sandbox.rename("a/b/f.txt", "a/g.txt")
    assert (await sandbox.stat("a/g.txt")).size == 2
    assert await sandbox.exists("a/b")
    listing = await sandbox.list_dir("a", recursive=True)
    assert [(entry.path, entry.kind) for entry in listing.entries] == [
        ("a/b", FileKind.DIRECTORY),
        ("a/g.txt", FileKind.FILE),
    ]
    await sandbox.remove("a", recursive=True)
    assert not await sandbox.exists("a")


async def test_an_undeclared_file_api_is_refused_before_the_sandbox(tmp_path: Path) -> None:
    """Declared capabilities without file-api: every call is CapabilityNotSupported, no change."""
    _manager, sandbox = await _acquired(tmp_path, capabilities=CapabilitySet())
    (Path(sandbox.root) / "kept").write_bytes(b"k")
    for call in (
        sandbox.list_dir(""),
        sandbox.stat("kept"),
        sandbox.exists("kept"),
        sandbox.remove("kept"),
        sandbox.rename("kept", "moved"),
        sandbox.make_dir("new"),
    ):
        with pytest.raises(CapabilityNotSupported) as caught:
            await call
        assert "file API" in str(caught.value)
        assert caught.value.hint is not None
    assert (Path(sandbox.root) / "kept").read_bytes() == b"k"
    assert not (Path(sandbox.root) / "new").exists()


async def test_a_vanished_sandbox_is_recorded_as_lost(tmp_path: Path) -> None:
    """SandboxNotFound from a file-API call persists the loss, as for exec and reads."""
    manager, sandbox = await _acquired(tmp_path)
    shutil.rmtree(Path(sandbox.root).parent)
    with pytest.raises(SandboxNotFound):
        await sandbox.list_dir("")
    assert await manager.observe("s1") is LifecycleState.LOST
