"""The local provider's find, destroy, list_owned and health.

Two deployments sharing one base directory are tested on real PostgreSQL in
``tests/integration/test_deployments.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mango.domain.errors import ConfigurationError, OwnershipError, SandboxNotFound
from mango.domain.values import Command, SandboxRef, SandboxSpec
from mango.local import LocalProvider

SPEC = SandboxSpec(timeout=30.0)
KEY = "session-1"


def _is_dir(ref: SandboxRef) -> bool:
    return Path(ref.external_id).is_dir()


def _names(directory: Path) -> list[str]:
    """Names in ``directory``, leaving out mango's record trees once they are empty."""
    if not directory.exists():
        return []
    return sorted(
        p.name
        for p in directory.iterdir()
        if not (p.name in (".owners", ".runs") and not any(p.iterdir()))
    )


def _record(ref: SandboxRef) -> Path:
    session_dir = Path(ref.external_id)
    return session_dir.parent / ".owners" / f"{session_dir.name}.json"


def _overwrite(record: Path, text: str) -> None:
    record.chmod(0o644)
    record.write_text(text)


def _overwrite_new(path: Path) -> None:
    path.write_text("not a directory")


def _move(ref: SandboxRef, target: Path) -> None:
    Path(ref.external_id).rename(target)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """One base directory shared by every provider of a test."""
    return tmp_path / "sandboxes"


async def test_another_deployments_record_is_refused_by_name(base: Path) -> None:
    """A directory moved under our name, or a record of another namespace there, is not ours."""
    ours = LocalProvider(base, namespace="team-a")
    theirs = await LocalProvider(base, namespace="team-b").create(KEY, SPEC)
    _move(theirs.ref, base / ours.ownership.name(KEY))
    with pytest.raises(OwnershipError, match="unmanaged"):
        await ours.find(KEY)
    with pytest.raises(OwnershipError, match="unmanaged"):
        await ours.create(KEY, SPEC)
    assert await ours.list_owned() == []
    _record(theirs.ref).rename(base / ".owners" / f"{ours.ownership.name(KEY)}.json")
    with pytest.raises(OwnershipError, match="another deployment"):
        await ours.find(KEY)
    with pytest.raises(OwnershipError, match="another deployment"):
        await ours.destroy(KEY, SandboxRef("local", str(base / ours.ownership.name(KEY))))
    assert await ours.list_owned() == []


async def test_destroy_trusts_the_owner_record_not_the_workspace(base: Path) -> None:
    """Forged records in the workspace or beside it change nothing; a tampered record refuses."""
    provider = LocalProvider(base, namespace="team-a")
    sandbox = await provider.create(KEY, SPEC)
    forged = {"format": 2, "provider": "local", "labels": provider.ownership.labels("other")}
    await sandbox.write_file("owner.json", json.dumps(forged).encode())
    (Path(sandbox.ref.external_id) / "owner.json").write_text(json.dumps(forged))
    assert await provider.find(KEY) == sandbox.ref
    with pytest.raises(OwnershipError, match="does not belong to this session"):
        await provider.destroy("other", sandbox.ref)
    _overwrite(_record(sandbox.ref), json.dumps(forged))
    with pytest.raises(OwnershipError, match="another session"):
        await provider.destroy(KEY, sandbox.ref)
    assert _is_dir(sandbox.ref)


async def test_destroy_is_idempotent_and_kills_running_commands(base: Path) -> None:
    """destroy(key, ref) without attaching removes the tree; again is success."""
    provider = LocalProvider(base)
    sandbox = await provider.create(KEY, SPEC)
    await sandbox.exec(Command(argv=("sh", "-c", "echo x > f")))
    await provider.destroy(KEY, sandbox.ref)
    await provider.destroy(KEY, sandbox.ref)
    assert _names(base) == []
    with pytest.raises(SandboxNotFound):
        await provider.attach(KEY, sandbox.ref, SPEC)
    with pytest.raises(OwnershipError):
        await provider.destroy(KEY, SandboxRef("docker", sandbox.ref.external_id))


async def test_find_never_creates(base: Path) -> None:
    """find on an unknown key answers None and leaves no trace."""
    provider = LocalProvider(base)
    assert await provider.find(KEY) is None
    assert await provider.list_owned() == []
    assert _names(base.parent) == []


async def test_health_checks_the_base_directory(tmp_path: Path) -> None:
    """A writable base is healthy (and created); a file in its place is a ConfigurationError."""
    assert "writable" in await LocalProvider(tmp_path / "new").health()
    assert _names(tmp_path) == ["new"]
    _overwrite_new(tmp_path / "file")
    with pytest.raises(ConfigurationError) as caught:
        await LocalProvider(tmp_path / "file").health()
    assert "MANGO_LOCAL_SANDBOX_DIR" in (caught.value.hint or "")
