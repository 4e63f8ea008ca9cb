"""Pinned skills end to end on a real daemon: present before the step, read-only, repaired.

One container for the main test (about 3 s on a quiet machine); the admission
test on the local provider starts none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.app.memory_store import InMemoryBindingStore
from mango.app.skill_catalog import InMemorySkillCatalog
from mango.app.skills import SessionSkills
from mango.domain import Command, SandboxSpec
from mango.domain.errors import CapabilityNotSupported, PathEscapeError, PermanentError
from mango.domain.files import FileStore
from mango.local import LocalProvider

from .helpers import SCRIPT, SKILL_MD, skill_tree

pytestmark = [pytest.mark.docker, pytest.mark.postgres]

SKILL_DIR = "/workspace/skills/hello-skill"


def sh(script: str) -> Command:
    return Command(["sh", "-c", script])


async def test_a_pinned_skill_is_there_read_only_and_repaired_before_each_step(
    docker_manager: SessionManager, tmp_path: Path
) -> None:
    """Uploaded, pinned at creation, present at the first step, unwritable even to root,
    and restored when the host copy is damaged."""
    skills = docker_manager.session_skills
    version = await skills.add(skill_tree(tmp_path))
    created = await docker_manager.create_session("skilled", skills=[str(version.ref)])
    assert created.created
    assert created.skills == (version,)
    sandbox = await docker_manager.acquire("skilled", SandboxSpec())
    first = await docker_manager.materialize_skills("skilled", SandboxSpec())
    assert (first.imported, first.present) == (1, 0)
    ran = await sandbox.exec(sh(f"cat {SKILL_DIR}/SKILL.md; {SKILL_DIR}/scripts/hello.sh"))
    assert ran.stdout == SKILL_MD + b"hello from the skill\n", ran
    assert await sandbox.read_file("skills/hello-skill/scripts/hello.sh") == SCRIPT
    attempts = await sandbox.exec(
        sh(
            f'id -u; for a in "echo x > {SKILL_DIR}/SKILL.md" "chmod 666 {SKILL_DIR}/SKILL.md" '
            f'"rm -rf {SKILL_DIR}" "touch {SKILL_DIR}/new" "mkdir /workspace/skills/other"; '
            'do sh -c "$a" 2>/dev/null && echo "ALLOWED: $a"; done'
        )
    )
    assert attempts.stdout == b"0\n", attempts
    for path in ("skills/hello-skill/SKILL.md", "skills/new.txt"):
        with pytest.raises(PathEscapeError, match="read-only /workspace/skills"):
            await sandbox.write_file(path, b"tool write")
    again = await docker_manager.materialize_skills("skilled", SandboxSpec())
    assert (again.imported, again.present) == (0, 1)

    host_tree = sandbox.host_dir / "skills" / "hello-skill"  # type: ignore[attr-defined]
    (host_tree / "docs" / "deep" / "note.txt").unlink()
    (host_tree / "SKILL.md").chmod(0o644)
    repaired = await docker_manager.materialize_skills("skilled", SandboxSpec())
    assert (repaired.imported, repaired.present) == (1, 0)
    listed = await sandbox.exec(
        sh(f"cd {SKILL_DIR} && find . -type f | sort && stat -c %a SKILL.md")
    )
    assert listed.stdout == b"./SKILL.md\n./docs/deep/note.txt\n./scripts/hello.sh\n444\n"

    # An archive lost from the Files store is a permanent error naming it; the same
    # tree uploaded again restores it (the same version), and the next step repairs.
    await skills.blobs.delete(version.blob_key)
    (host_tree / "SKILL.md").unlink()
    with pytest.raises(PermanentError, match="hello-skill@1 is missing from the Files store"):
        await docker_manager.materialize_skills("skilled", SandboxSpec())
    assert (await skills.add(skill_tree(tmp_path / "again"))).identity == version.identity
    restored = await docker_manager.materialize_skills("skilled", SandboxSpec())
    assert (restored.imported, restored.present) == (1, 0)


async def test_a_provider_without_skill_bundles_refuses_pins_at_admission(
    tmp_path: Path, blobs: FileStore
) -> None:
    """The local provider does not declare skill-bundles: the Session is never created."""
    store = InMemoryBindingStore()
    skills = SessionSkills(InMemorySkillCatalog(store), blobs, store.namespace)
    manager = SessionManager(LocalProvider(tmp_path / "local"), store, skills=skills)
    version = await skills.add(skill_tree(tmp_path))
    with pytest.raises(CapabilityNotSupported, match="skill bundle mounts"):
        await manager.create_session("refused", skills=[str(version.ref)])
    assert await store.get_session("refused") is None
    assert (await manager.create_session("plain")).created
