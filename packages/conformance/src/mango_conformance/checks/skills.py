"""The ``skill-bundles`` group: verified skill trees, read-only at ``/workspace/skills/<name>``.

What the skills materializer relies on (:class:`~mango.provider.SkillBundleSandbox`):

* S-1: ``has_skill_bundles`` answers False before an import (and, after it,
  one answer per mount in order: False for another identity);
* S-2: a failed import never becomes visible: bytes of another SHA-256 are
  :class:`~mango.provider.ContentMismatch`, an archive with an unsafe entry
  (after good ones) is :class:`~mango.provider.UnsafeArchiveError`, a reader
  that breaks off passes its error through; each time nothing appears at the
  runtime path or beside it, and ``has`` stays False;
* S-3: a full import is visible: ``has`` is True, and a file tool and a shell
  read each file's bytes at the runtime path;
* S-4: the archive's exec bits survive (a script runs), every other file is
  ``0444``;
* S-5: the tree is read-only to file tools (refused, permanently) and to
  every command, root included;
* S-6: a fresh provider's attach still has the skill and reads it;
* S-7: importing it again (a repair) leaves exactly the same tree.

The checks build their own small archives (stdlib :mod:`zipfile`), so they
need no testbed. Two sandboxes in all.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import hashlib
import io
import stat
import zipfile
from collections.abc import AsyncIterator
from typing import Protocol, cast

import pytest

from mango.provider import (
    SKILLS_ROOT,
    Capability,
    ContentMismatch,
    PermanentError,
    Sandbox,
    SkillBundleSandbox,
    SkillMount,
    UnsafeArchiveError,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness
from mango_conformance.scripts import CAT_ARG

__all__ = ["SkillBundleChecks", "skill_archive"]

_SKILLS = Capability.SKILL_BUNDLES.value
NAME = "conformance-skill"
RUNTIME = f"{SKILLS_ROOT}/{NAME}"
SKILL_MD = b"---\nname: conformance-skill\ndescription: checks\n---\n# A skill\n"
SCRIPT = b"#!/bin/sh\necho skill script ran\n"
NOTE = b"a nested note\n"
FILES = {
    "SKILL.md": (SKILL_MD, 0o644),
    "bin/run.sh": (SCRIPT, 0o755),
    "docs/a/note.txt": (NOTE, 0o644),
}

TAMPER = (
    'for a in "printf x > $1/SKILL.md" "chmod 666 $1/SKILL.md" "rm -rf $1" "touch $1/planted" '
    '"mv $1 $1.moved" "mkdir ${1%/*}/planted"; do sh -c "$a" 2>/dev/null && '
    'printf "ALLOWED: %s\\n" "$a"; done; :'
)
"""Try every way a command could change the tree ``$1``; print each one that worked."""
LIST = (
    'cd "$1" 2>/dev/null && find . | sort && '
    'for f in $(find . -type f | sort); do stat -c "%a $f" "$f"; done; :'
)
"""Every entry below ``$1``, then each file's mode."""


def skill_archive(
    files: dict[str, tuple[bytes, int]], *, root: str = NAME, extra: tuple[str, ...] = ()
) -> bytes:
    """A skill archive: ``files`` (path -> bytes and mode) below ``root/``, then ``extra`` names."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, (data, mode) in sorted(files.items()):
            info = zipfile.ZipInfo(f"{root}/{path}", date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
        for name in extra:
            archive.writestr(name, b"unsafe")
    return buffer.getvalue()


def skill_mount(data: bytes, expanded: int, identity: str = "conformance-skill@1") -> SkillMount:
    """The mount a materializer builds for the archive ``data``."""
    return SkillMount(
        identity, NAME, RUNTIME, len(data), expanded, hashlib.sha256(data).hexdigest()
    )


class BrokeOff(OSError):
    """The reader's source failed part-way."""


async def chunks(data: bytes, *, fail: bool = False, size: int = 512) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
    if fail:
        raise BrokeOff("the source broke off")


class _SkillSandbox(Sandbox, SkillBundleSandbox, Protocol):
    """A sandbox with skill bundles (what a declaring provider hands out)."""


def _skills(harness: Harness, sandbox: Sandbox) -> _SkillSandbox:
    assert isinstance(sandbox, SkillBundleSandbox), (
        f"{harness.name} declares {_SKILLS} but its sandbox is not a SkillBundleSandbox"
    )
    return cast(_SkillSandbox, sandbox)


GOOD = skill_archive(FILES)
EXPANDED = sum(len(data) for data, _ in FILES.values())
OTHER = skill_mount(GOOD, EXPANDED, identity="conformance-skill@2")
"""The same bytes under another identity: never the imported one."""
EXPECTED_LISTING = (
    b".\n./SKILL.md\n./bin\n./bin/run.sh\n./docs\n./docs/a\n./docs/a/note.txt\n"
    b"444 ./SKILL.md\n555 ./bin/run.sh\n444 ./docs/a/note.txt\n"
)


def _visible(harness: Harness, sandbox: _SkillSandbox, what: str) -> None:
    """S-3, S-4: ``has``, every file's bytes through a tool and a shell, the modes, the script."""
    answers = list(harness.run(sandbox.has_skill_bundles([OTHER, skill_mount(GOOD, EXPANDED)])))
    assert answers == [False, True], (
        f"{what}: has_skill_bundles([another identity, the imported skill]) is {answers}, "
        "not [False, True]"
    )
    for path, (data, _) in FILES.items():
        read = harness.run(sandbox.read_file(f"skills/{NAME}/{path}"))
        assert read == data, f"{what}: read_file(skills/{NAME}/{path}) gave {read[:60]!r}"
        shell = harness.sh(sandbox, CAT_ARG, f"{RUNTIME}/{path}")
        assert (shell.exit_code, shell.stdout) == (0, data), (
            f"{what}: cat {RUNTIME}/{path} gave {shell.stdout[:60]!r} (exit {shell.exit_code})"
        )
    listing = harness.sh(sandbox, LIST, RUNTIME).stdout
    assert listing == EXPECTED_LISTING, (
        f"{what}: the tree at {RUNTIME} is not exactly the archive's files with 0444 and "
        f"their exec bits:\n{listing.decode(errors='replace')}"
    )
    ran = harness.sh(sandbox, '"$1"', f"{RUNTIME}/bin/run.sh")
    assert (ran.exit_code, ran.stdout) == (0, b"skill script ran\n"), (
        f"{what}: the skill's executable script did not run (exit {ran.exit_code})"
    )


def _nothing_visible(harness: Harness, sandbox: _SkillSandbox, what: str) -> None:
    listing = harness.sh(sandbox, 'ls -A "$1" 2>/dev/null; :', SKILLS_ROOT).stdout
    assert listing == b"", f"{what} left something below {SKILLS_ROOT}: {listing[:200]!r}"
    answers = list(harness.run(sandbox.has_skill_bundles([skill_mount(GOOD, EXPANDED)])))
    assert answers == [False], f"has_skill_bundles is {answers} after {what}"


class SkillBundleChecks:
    """The ``skill-bundles`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_SKILLS)
    def test_skill_bundles_import(self, conformance: Harness) -> None:
        """S-1, S-3..S-7: import, visible with exec bits, read-only, fresh attach, repair."""
        key = conformance.new_key("skills")
        created = conformance.create(key)
        sandbox = _skills(conformance, created)
        mount = skill_mount(GOOD, EXPANDED)
        before = list(conformance.run(sandbox.has_skill_bundles([mount])))
        assert before == [False], f"S-1: has_skill_bundles before the import is {before}"
        conformance.run(sandbox.import_skill_bundle(mount, chunks(GOOD)))
        _visible(conformance, sandbox, "S-3/S-4")
        user = conformance.sh(sandbox, "id -u").stdout.strip()
        tampered = conformance.sh(sandbox, TAMPER, RUNTIME)
        assert tampered.stdout == b"", (
            f"S-5: a command running as uid {user.decode() or '?'} changed the skill: "
            f"{tampered.stdout.decode(errors='replace').strip()}"
        )
        for path in (f"skills/{NAME}/SKILL.md", f"skills/{NAME}/new.txt"):
            with pytest.raises(PermanentError):
                conformance.run(sandbox.write_file(path, b"a tool's write"))
        attached = _skills(
            conformance, conformance.attach(key, created.ref, conformance.open_provider())
        )
        _visible(conformance, attached, "S-6 (a fresh provider's attach)")
        conformance.run(attached.import_skill_bundle(mount, chunks(GOOD, size=100)))
        _visible(conformance, attached, "S-7 (imported again)")

    @pytest.mark.mango_capability(_SKILLS)
    def test_skill_bundles_failed_imports_are_never_visible(self, conformance: Harness) -> None:
        """S-2: another digest, an unsafe entry after good ones, a broken reader: nothing shows."""
        sandbox = _skills(conformance, conformance.create())
        mount = skill_mount(GOOD, EXPANDED)
        with pytest.raises(ContentMismatch):
            conformance.run(sandbox.import_skill_bundle(mount, chunks(b"x" + GOOD[1:])))
        _nothing_visible(conformance, sandbox, "an archive with another SHA-256")
        unsafe = skill_archive(FILES, extra=(f"{NAME}/../escaped",))
        with pytest.raises(UnsafeArchiveError):
            conformance.run(
                sandbox.import_skill_bundle(skill_mount(unsafe, EXPANDED + 6), chunks(unsafe))
            )
        _nothing_visible(conformance, sandbox, "an archive with an unsafe entry")
        escaped = conformance.sh(sandbox, 'ls -A "$1" 2>/dev/null; :', "/workspace").stdout
        assert b"escaped" not in escaped, "an unsafe entry was extracted outside the skill"
        with pytest.raises(BrokeOff):
            conformance.run(sandbox.import_skill_bundle(mount, chunks(GOOD[:700], fail=True)))
        _nothing_visible(conformance, sandbox, "an import whose reader broke off")


mark_checks(SkillBundleChecks, pytest.mark.mango_capability_group)
