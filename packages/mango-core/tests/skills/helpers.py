"""Skill trees and archives for the tests: a good one, and the hostile kinds."""

from __future__ import annotations

import hashlib
import io
import stat
import struct
import warnings
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

from mango.domain.skills import SKILLS_ROOT, SkillMount

SKILL_MD = b"---\nname: hello-skill\ndescription: Says hello.\n---\n# Hello\nRun scripts/hello.sh\n"
SCRIPT = b"#!/bin/sh\necho hello from the skill\n"


def skill_tree(root: Path, name: str = "hello_skill", *, skill_md: bytes = SKILL_MD) -> Path:
    """A skill directory: SKILL.md, an executable script and a nested note."""
    tree = root / name
    (tree / "scripts").mkdir(parents=True)
    (tree / "SKILL.md").write_bytes(skill_md)
    (tree / "scripts" / "hello.sh").write_bytes(SCRIPT)
    (tree / "scripts" / "hello.sh").chmod(0o755)
    (tree / "docs" / "deep").mkdir(parents=True)
    (tree / "docs" / "deep" / "note.txt").write_bytes(b"a note\n")
    return tree


def entry(name: str, data: bytes = b"x", *, mode: int = stat.S_IFREG | 0o644) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build_zip(*items: tuple[zipfile.ZipInfo | str, bytes]) -> bytes:
    """A zip of ``(entry or name, data)`` written as given (no sanitising)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")  # a duplicate name is what some tests want
        for item, data in items:
            info = entry(item) if isinstance(item, str) else item
            archive.writestr(info, data)
    return buffer.getvalue()


def mount_for(
    data: bytes, expanded: int, name: str = "hello-skill", identity: str = "skill-1@1"
) -> SkillMount:
    """The mount a materializer would build for ``data`` (checksum and size of these bytes)."""
    return SkillMount(
        identity=identity,
        name=name,
        runtime_path=f"{SKILLS_ROOT}/{name}",
        size=len(data),
        expanded_size=expanded,
        sha256=hashlib.sha256(data).hexdigest(),
    )


async def chunks(data: bytes, size: int = 4096) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def many_entries(count: int, root: str = "hello-skill") -> bytes:
    """A real zip of ``count`` empty stored files, written directly (zip64 past 65 535).

    Written with :mod:`struct` rather than :mod:`zipfile` so 100 000 entries
    take a fraction of a second.
    """
    local = bytearray()
    central = bytearray()
    for index in range(count):
        name = f"{root}/{index}".encode()
        offset = len(local)
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0)
        local += name
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50, 0x031E, 20, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0, 0, 0, 0,
            (stat.S_IFREG | 0o644) << 16, offset,
        )  # fmt: skip
        central += name
    start, size = len(local), len(central)
    out = local + central
    if count <= 0xFFFF:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, size, start, 0)
        return bytes(out)
    record_at = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, start)
    out += struct.pack("<IIQI", 0x07064B50, 0, record_at, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, size, start, 0)
    return bytes(out)
