"""Uploads, versions and pins: the rules, on the PostgreSQL and the in-memory catalog alike."""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import pytest

from mango.app.skill_upload import canonical_skill
from mango.app.skills import SessionSkills
from mango.domain.errors import InvalidInput, SessionDeleting, UnsafeArchiveError
from mango.domain.skills import (
    MAX_SESSION_SKILL_BYTES,
    SkillVersion,
    check_session_skills,
    parse_skill_ref,
)

from .helpers import SKILL_MD, build_zip, skill_tree
from .test_skill_kit import _hostile

pytestmark = pytest.mark.postgres


async def test_an_upload_is_a_version_and_the_same_bytes_are_that_version(
    skills: SessionSkills, tmp_path: Path
) -> None:
    """First upload is NAME@1; the same tree again is @1; a changed tree is @2."""
    tree = skill_tree(tmp_path)
    first = await skills.add(tree)
    assert str(first.ref) == "hello-skill@1"
    assert first.file_count == 3
    assert first.description == "Says hello."
    assert (await skills.add(tree)).identity == first.identity
    (tree / "extra.txt").write_bytes(b"more\n")
    second = await skills.add(tree)
    assert str(second.ref) == "hello-skill@2"
    assert second.skill_id == first.skill_id
    assert [str(v.ref) for v in await skills.list_versions()] == ["hello-skill@1", "hello-skill@2"]
    async with skills.blobs.open(second.blob_key, size=second.size, sha256=second.sha256) as body:
        data = b"".join([chunk async for chunk in body])
    assert len(data) == second.size


async def test_racing_uploads_of_one_name_get_consecutive_versions(
    skills: SessionSkills, tmp_path: Path
) -> None:
    """Names are unique per scope: two different trees uploaded at once are @1 and @2."""
    trees = [skill_tree(tmp_path / str(n)) for n in range(2)]
    (trees[1] / "other.txt").write_bytes(b"other\n")
    made = await asyncio.gather(*(skills.add(tree) for tree in trees))
    assert sorted(v.version for v in made) == [1, 2]
    assert len({v.skill_id for v in made}) == 1


async def test_a_session_is_created_with_its_pins_once(
    skills: SessionSkills, tmp_path: Path
) -> None:
    """Created with its pins; again with the same pins is success; with others, refused."""
    version = await skills.add(skill_tree(tmp_path))
    created = await skills.create_session("pinned", ["hello-skill@1"])
    assert created == (True, (version,))
    assert await skills.create_session("pinned", ["hello-skill@1"]) == (False, (version,))
    with pytest.raises(InvalidInput, match="pinned when it is created"):
        await skills.create_session("pinned", [])
    assert await skills.session_skills("pinned") == (version,)
    assert await skills.create_session("plain") == (True, ())
    with pytest.raises(InvalidInput, match="pinned when it is created"):
        await skills.create_session("plain", ["hello-skill@1"])
    assert await skills.catalog.drop_session_skills("pinned") == 1
    assert await skills.session_skills("pinned") == ()


async def test_unknown_and_conflicting_pins_are_refused_before_anything_is_written(
    skills: SessionSkills, tmp_path: Path
) -> None:
    """A missing version, two versions of one name, a malformed ref: nothing is created."""
    tree = skill_tree(tmp_path)
    await skills.add(tree)
    (tree / "extra.txt").write_bytes(b"more\n")
    await skills.add(tree)
    with pytest.raises(InvalidInput, match="no skill hello-skill@9"):
        await skills.create_session("s1", ["hello-skill@9"])
    with pytest.raises(InvalidInput, match="would both be /workspace/skills/hello-skill"):
        await skills.create_session("s1", ["hello-skill@1", "hello-skill@2"])
    with pytest.raises(InvalidInput, match="NAME@VERSION"):
        await skills.create_session("s1", ["hello-skill"])
    assert await skills.create_session("s1") == (True, ())


@pytest.mark.parametrize("catalog", ["postgres"], indirect=True)
async def test_a_fenced_session_takes_no_pins(
    skills: SessionSkills, tmp_path: Path, store: object
) -> None:
    """A Session fenced for deletion is SessionDeleting, not re-created."""
    await skills.add(skill_tree(tmp_path))
    await skills.create_session("going")
    await store.fence_session("going")  # type: ignore[attr-defined]
    with pytest.raises(SessionDeleting):
        await skills.create_session("going")


def _version(name: str, expanded: int) -> SkillVersion:
    return SkillVersion("skill-" + "a" * 32, name, 1, "", "k", 1, "0" * 64, expanded, 1, None)  # type: ignore[arg-type]


def test_the_session_budget_is_500_mib_expanded() -> None:
    """Pins adding up to 500 MiB are fine; one byte more is refused, naming the total."""
    share = MAX_SESSION_SKILL_BYTES // 20
    fitting = [_version(f"s{n}", share) for n in range(20)]
    assert len(check_session_skills(fitting)) == 20
    over = [*fitting[:-1], _version("s19", share + MAX_SESSION_SKILL_BYTES % 20 + 1)]
    with pytest.raises(InvalidInput, match="500 MiB"):
        check_session_skills(over)


def test_refs_parse_strictly() -> None:
    """NAME@VERSION with a positive version; anything else is InvalidInput."""
    assert str(parse_skill_ref("my-skill@12")) == "my-skill@12"
    for bad in ("my-skill", "My_Skill@1", "x@0", "x@-1", "@1", "x@1@2", "x@01"):
        with pytest.raises(InvalidInput):
            parse_skill_ref(bad)


# ------------------------------------------------------------------ uploads


def _zip_file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "upload.zip"
    path.write_bytes(data)
    return path


def test_a_zip_with_its_own_top_directory_and_directory_entries_uploads(tmp_path: Path) -> None:
    """'zip -r' output: the top directory is the root, its directory entries are dropped."""
    data = build_zip(
        ("My_Tool/", b""),
        ("My_Tool/SKILL.md", b"# no frontmatter\n"),
        ("My_Tool/bin/", b""),
        ("My_Tool/bin/run", b"run"),
    )
    skill = canonical_skill(_zip_file(tmp_path, data))
    with skill.archive:
        names = zipfile.ZipFile(skill.archive).namelist()
    assert skill.name == "my-tool"
    assert names == ["my-tool/SKILL.md", "my-tool/bin/run"]


def test_a_zip_with_skill_md_at_its_top_uploads_under_the_frontmatter_name(
    tmp_path: Path,
) -> None:
    """Files at the top of the zip: the frontmatter names the skill."""
    skill = canonical_skill(_zip_file(tmp_path, build_zip(("SKILL.md", SKILL_MD), ("a", b"a"))))
    skill.archive.close()
    assert (skill.name, skill.file_count) == ("hello-skill", 2)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("100000-entries", "100000 entries"),
        ("absolute", "absolute path"),
        ("backslash", "backslash"),
        ("duplicate", "appears twice"),
        ("fifo", "not a regular file"),
        ("lying-header", "inflates past|damaged|shorter"),
        ("no-skill-md", "no .*SKILL.md"),
        ("parent-escape", "not canonical"),
        ("symlink", "symlink"),
        ("truncated", "not a zip"),
        ("zip-bomb", "expands to more than"),
    ],
)
def test_a_hostile_zip_is_refused_at_upload(tmp_path: Path, case: str, reason: str) -> None:
    """The same hostile archives the provider refuses never become a version either."""
    data = _hostile()[case][0]
    with pytest.raises(UnsafeArchiveError, match=reason):
        canonical_skill(_zip_file(tmp_path, data))


def test_a_directory_with_a_symlink_or_without_skill_md_is_refused(tmp_path: Path) -> None:
    """Links are never followed into an upload; SKILL.md must be at the top."""
    tree = skill_tree(tmp_path / "a")
    (tree / "leak").symlink_to("/etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="symlink"):
        canonical_skill(tree)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "README.md").write_text("no skill here")
    with pytest.raises(InvalidInput, match=r"no SKILL\.md"):
        canonical_skill(bare)
    named = skill_tree(tmp_path / "b", skill_md=b"---\nname: Not A Name\n---\n")
    with pytest.raises(InvalidInput, match=r"a-z, 0-9"):
        canonical_skill(named)


async def test_the_python_api_uploads_lists_and_pins(database_url: str, tmp_path: Path) -> None:
    """mango.open_skills uploads and lists; the manager pins at creation, refused on local."""
    import mango
    from mango.domain.errors import CapabilityNotSupported

    environ = {
        "MANGO_DATABASE_URL": database_url,
        "MANGO_STATE_DIR": str(tmp_path / "state"),
        "MANGO_FILE_STORE_DIR": str(tmp_path / "blobs"),
        "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1",
    }
    async with mango.open_skills(environ=environ) as library:
        version = await library.add(skill_tree(tmp_path))
        assert [str(v.ref) for v in await library.list_versions()] == ["hello-skill@1"]
    async with mango.open_session_manager(environ=environ) as manager:
        assert (await manager.session_skills.list_versions())[0].identity == version.identity
        with pytest.raises(CapabilityNotSupported):
            await manager.create_session("api", skills=["hello-skill@1"])
        assert (await manager.create_session("api")).created
