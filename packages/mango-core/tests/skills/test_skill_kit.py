"""The kit's host-side skill trees: verify, extract, publish; repair; hostile archives; crashes.

No daemon: :class:`HostSkillBundles` on two temporary directories is exactly
what Docker's sandboxes use for their skills mount. About 2 s in all (the
100 000-entry archive and the SIGKILL subprocess are most of it).
"""

from __future__ import annotations

import functools
import hashlib
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mango.app.skill_upload import canonical_skill
from mango.domain.errors import ContentMismatch, UnsafeArchiveError
from mango.domain.skills import SkillMount
from mango.provider.hostskills import ARCHIVE_PREFIX, STAGING_PREFIX, HostSkillBundles

from .helpers import SCRIPT, SKILL_MD, build_zip, chunks, entry, many_entries, mount_for, skill_tree


@pytest.fixture
def bundles(tmp_path: Path) -> HostSkillBundles:
    (tmp_path / "skills").mkdir(mode=0o755)
    (tmp_path / "state").mkdir(mode=0o700)
    return HostSkillBundles(tmp_path / "skills", tmp_path / "state", lock_timeout=2.0)


@pytest.fixture
def canonical(tmp_path: Path) -> tuple[bytes, SkillMount]:
    """The canonical archive of the test skill and its mount."""
    skill = canonical_skill(skill_tree(tmp_path / "src"))
    with skill.archive:
        data = skill.archive.read()
    assert skill.name == "hello-skill"
    return data, mount_for(data, skill.expanded_size)


def published(bundles: HostSkillBundles) -> dict[str, tuple[bytes, int]]:
    """Everything a sandbox would see below the skills mount: ``{path: (bytes, mode)}``."""
    return {
        path.relative_to(bundles.skills_root).as_posix(): (
            path.read_bytes(),
            stat.S_IMODE(path.stat().st_mode),
        )
        for path in sorted(bundles.skills_root.rglob("*"))
        if path.is_file()
    }


def leftovers(bundles: HostSkillBundles) -> list[str]:
    """What imports left: staging trees and archive copies (never in the skills directory)."""
    names = [p.name for p in bundles.state_root.iterdir() if p.name.startswith(STAGING_PREFIX)]
    assert not [p for p in bundles.skills_root.iterdir() if p.name.startswith(".")]
    return names


async def test_an_import_publishes_a_read_only_tree_with_exec_bits(
    bundles: HostSkillBundles, canonical: tuple[bytes, SkillMount]
) -> None:
    """The tree appears complete at <skills>/<name>, 0444 (+x kept), and ``has`` finds it."""
    data, mount = canonical
    assert not await bundles.has(mount)
    await bundles.import_(mount, chunks(data, 1000))
    assert published(bundles) == {
        "hello-skill/SKILL.md": (SKILL_MD, 0o444),
        "hello-skill/docs/deep/note.txt": (b"a note\n", 0o444),
        "hello-skill/scripts/hello.sh": (SCRIPT, 0o555),
    }
    assert stat.S_IMODE((bundles.skills_root / "hello-skill").stat().st_mode) == 0o755
    assert await bundles.has(mount)
    assert not await bundles.has(mount_for(data, mount.expanded_size, identity="skill-2@1"))
    assert leftovers(bundles) == []


@pytest.mark.parametrize(
    "damage",
    ["missing-file", "changed-mode", "size-drift", "added-file", "symlink", "marker"],
)
async def test_host_side_damage_is_found_and_repaired(
    bundles: HostSkillBundles, canonical: tuple[bytes, SkillMount], damage: str
) -> None:
    """Each kind of damage makes ``has`` False, and a new import restores the tree exactly."""
    data, mount = canonical
    await bundles.import_(mount, chunks(data))
    before = published(bundles)
    tree = bundles.skills_root / "hello-skill"
    note = tree / "docs" / "deep" / "note.txt"
    if damage == "missing-file":
        note.unlink()
    elif damage == "changed-mode":
        note.chmod(0o666)
    elif damage == "size-drift":
        note.chmod(0o644)
        note.write_bytes(b"a longer note\n")
        note.chmod(0o444)
    elif damage == "added-file":
        (tree / "extra.txt").write_bytes(b"planted")
        (tree / "extra.txt").chmod(0o444)
    elif damage == "symlink":
        note.unlink()
        note.symlink_to("/etc/hostname")
    else:
        marker = next(p for p in bundles.state_root.iterdir() if p.name.startswith("skill-"))
        marker.write_bytes(b"another\n")
    assert not await bundles.has(mount)
    await bundles.import_(mount, chunks(data))
    assert await bundles.has(mount)
    assert published(bundles) == before
    assert leftovers(bundles) == []


@functools.cache
def _hostile() -> dict[str, tuple[bytes, int, str]]:
    """``{case: (archive, expanded size claimed, reason expected)}``."""
    bomb = build_zip(("hello-skill/SKILL.md", b"x"), ("hello-skill/zeros", bytes(40_000_000)))
    lying = bytearray(build_zip(("hello-skill/SKILL.md", b"x"), ("hello-skill/a", b"a" * 5000)))
    # Both headers of the second entry rewritten to declare 10 bytes; it inflates to 5000.
    local = lying.find(b"hello-skill/a") - 30
    central = lying.find(b"hello-skill/a", local + 31) - 46
    for size_at in (local + 22, central + 24):
        lying[size_at : size_at + 4] = (10).to_bytes(4, "little")
    good = build_zip(("hello-skill/SKILL.md", b"x"), ("hello-skill/b", b"bb"))
    return {
        "zip-bomb": (bomb, 100, "expands to more than"),
        "100000-entries": (many_entries(100_000), 0, "100000 entries"),
        "parent-escape": (build_zip(("hello-skill/../evil", b"x")), 1, "not canonical"),
        "absolute": (build_zip(("/etc/hello-skill/SKILL.md", b"x")), 1, "absolute path"),
        "backslash": (build_zip(("hello-skill\\SKILL.md", b"x")), 1, "backslash"),
        "outside-root": (build_zip(("other/SKILL.md", b"x")), 1, "outside the archive root"),
        "symlink": (
            build_zip(
                ("hello-skill/SKILL.md", b"x"),
                (entry("hello-skill/link", mode=stat.S_IFLNK | 0o777), b"/etc/passwd"),
            ),
            12,
            "symlink",
        ),
        "fifo": (
            build_zip((entry("hello-skill/SKILL.md", mode=stat.S_IFIFO | 0o644), b"x")),
            1,
            "not a regular file",
        ),
        "directory-entry": (
            build_zip(("hello-skill/SKILL.md", b"x"), ("hello-skill/dir/", b"")),
            1,
            "directory entry",
        ),
        "duplicate": (
            build_zip(("hello-skill/SKILL.md", b"x"), ("hello-skill/SKILL.md", b"y")),
            2,
            "appears twice",
        ),
        "no-skill-md": (build_zip(("hello-skill/README.md", b"x")), 1, "no hello-skill/SKILL.md"),
        "lying-header": (bytes(lying), 11, "damaged|inflates past"),
        "truncated": (good[: len(good) // 2], 3, "not a zip"),
    }


HOSTILE = [
    "100000-entries", "absolute", "backslash", "directory-entry", "duplicate", "fifo",
    "lying-header", "no-skill-md", "outside-root", "parent-escape", "symlink", "truncated",
    "zip-bomb",
]  # fmt: skip


def test_every_hostile_case_is_checked() -> None:
    """The parametrization names every archive the builder makes."""
    assert sorted(_hostile()) == HOSTILE


@pytest.mark.parametrize("case", HOSTILE)
async def test_a_hostile_archive_is_rejected_with_a_reason_and_nothing_published(
    bundles: HostSkillBundles, case: str
) -> None:
    """Even with its own size and SHA-256 (as if a row said so), the archive never lands."""
    data, expanded, reason = _hostile()[case]
    mount = mount_for(data, expanded)
    with pytest.raises(UnsafeArchiveError, match=reason):
        await bundles.import_(mount, chunks(data, 1 << 20))
    assert published(bundles) == {}
    assert leftovers(bundles) == []
    assert not await bundles.has(mount)


@pytest.mark.parametrize("case", ["wrong-checksum", "short", "long"])
async def test_bytes_other_than_the_row_says_are_refused_before_extraction(
    bundles: HostSkillBundles, canonical: tuple[bytes, SkillMount], case: str
) -> None:
    """Another SHA-256, fewer or more bytes: ContentMismatch, nothing extracted or left."""
    data, mount = canonical
    if case == "wrong-checksum":
        sent = bytes([data[0] ^ 1]) + data[1:]
    elif case == "short":
        sent = data[:-10]
    else:
        sent = data + b"more"
    with pytest.raises(ContentMismatch):
        await bundles.import_(mount, chunks(sent))
    assert published(bundles) == {}
    assert leftovers(bundles) == []


async def test_a_failed_repair_keeps_the_published_tree(
    bundles: HostSkillBundles, canonical: tuple[bytes, SkillMount]
) -> None:
    """A broken transfer during a repair changes nothing visible."""
    data, mount = canonical
    await bundles.import_(mount, chunks(data))
    before = published(bundles)
    with pytest.raises(ContentMismatch):
        await bundles.import_(mount, chunks(data[:100]))
    assert published(bundles) == before


_CRASH = """
import asyncio, os, signal, sys
from pathlib import Path
from mango.provider.hostskills import HostSkillBundles, observe_skill_imports
from mango.domain.skills import SkillMount

root, archive, expanded, sha = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = archive.read_bytes()
mount = SkillMount("skill-1@1", "hello-skill", "/workspace/skills/hello-skill", len(data),
                   expanded, sha)
observe_skill_imports(lambda step, path: os.kill(os.getpid(), signal.SIGKILL))

async def chunks():
    yield data

asyncio.run(HostSkillBundles(root / "skills", root / "state").import_(mount, chunks()))
"""


async def test_sigkill_during_extraction_leaves_no_partial_tree_and_staging_goes_next_time(
    bundles: HostSkillBundles, canonical: tuple[bytes, SkillMount], tmp_path: Path
) -> None:
    """Killed after the first extracted file: nothing at the runtime path; the next import
    removes the staging directory and publishes the whole tree."""
    data, mount = canonical
    archive = tmp_path / "archive.zip"
    archive.write_bytes(data)
    root = bundles.skills_root.parent
    done = subprocess.run(  # noqa: ASYNC221 - the child must die on its own, synchronously
        [sys.executable, "-c", _CRASH, str(root), str(archive), str(mount.expanded_size),
         mount.sha256],
        check=False,
        capture_output=True,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert not (bundles.skills_root / "hello-skill").exists()
    assert list(bundles.skills_root.iterdir()) == [], "the sandbox would see part of a tree"
    staged = [
        p
        for p in bundles.state_root.iterdir()
        if p.name.startswith(STAGING_PREFIX) and not p.name.startswith(ARCHIVE_PREFIX)
    ]
    assert len(staged) == 1, "the crash should have left its staging directory"
    assert list(staged[0].rglob("*")), "the staging directory holds the partial extraction"
    assert not await bundles.has(mount)
    await bundles.import_(mount, chunks(data))
    assert await bundles.has(mount)
    assert leftovers(bundles) == []
    assert set(published(bundles)) == {
        "hello-skill/SKILL.md",
        "hello-skill/docs/deep/note.txt",
        "hello-skill/scripts/hello.sh",
    }


def test_the_canonical_archive_is_deterministic_and_sorted(tmp_path: Path) -> None:
    """The same tree gives the same bytes; entries are files only, below <name>/, sorted."""
    first = canonical_skill(skill_tree(tmp_path / "a"))
    second = canonical_skill(skill_tree(tmp_path / "b"))
    with first.archive, second.archive:
        assert first.sha256 == second.sha256
        assert first.archive.read() == second.archive.read()
        first.archive.seek(0)
        names = zipfile.ZipFile(first.archive).namelist()
    assert names == [
        "hello-skill/SKILL.md",
        "hello-skill/docs/deep/note.txt",
        "hello-skill/scripts/hello.sh",
    ]
    assert first.file_count == 3
    assert first.expanded_size == len(SKILL_MD) + len(SCRIPT) + len(b"a note\n")
    assert first.description == "Says hello."
    assert hashlib.sha256(b"").hexdigest() != first.sha256
    assert (tmp_path / "a").exists()
