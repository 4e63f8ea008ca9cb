"""The rules of a skill archive, checked on every upload and again before every extraction.

A skill archive is a zip holding files only, all below one top directory
(the archive root, the skill's name)::

    my-skill/SKILL.md
    my-skill/scripts/run.sh

:func:`check_archive_tail` reads the end-of-central-directory record first,
so an archive announcing more than :data:`~mango.domain.skills.MAX_SKILL_FILES`
entries (100 000 empty names, say) is refused before its directory is
parsed. :func:`skill_entries` then checks every entry of the opened zip, each
failure an :class:`~mango.domain.errors.UnsafeArchiveError` naming the entry:

* 1 to 1000 entries; the name valid UTF-8 (flagged so), no ``\\``, no NUL,
  not absolute, already canonical (no ``.``, ``..`` or empty segment, no
  trailing ``/``), below ``<root>/``;
* no two entries with one path; no directory entry, no symlink or other
  non-regular file; not encrypted; stored or deflated;
* the declared sizes add up to less than the bound (the real bytes are
  counted again while extracting: a header may lie);
* ``<root>/SKILL.md`` present.

:func:`frontmatter` reads the ``name:`` and ``description:`` of a
``SKILL.md`` (a ``---`` delimited block of ``key: value`` lines).
"""

from __future__ import annotations

import posixpath
import stat
import struct
import zipfile
from typing import BinaryIO

import attrs

from mango.domain.errors import UnsafeArchiveError
from mango.domain.skills import MAX_SKILL_EXPANDED_BYTES, MAX_SKILL_FILES

__all__ = [
    "SKILL_FILE",
    "SkillEntry",
    "check_archive_tail",
    "frontmatter",
    "skill_entries",
]

SKILL_FILE = "SKILL.md"
_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_LOCATOR_SIZE = 20
_MAX_COMMENT = 0xFFFF
_UTF8_FLAG = 0x800
_ENCRYPTED_FLAG = 0x1
_UNIX = 3
_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}


@attrs.frozen
class SkillEntry:
    """One checked file of a skill archive: its path below the root, size and exec bits."""

    path: str
    size: int
    mode: int
    """``0o444`` plus the entry's execute bits: the mode of the extracted file."""
    info: zipfile.ZipInfo = attrs.field(eq=False, repr=False)


def _zip64_entries(archive: BinaryIO, eocd_at: int) -> int | None:
    """The entry count of the zip64 end record the locator before ``eocd_at`` points to."""
    if eocd_at < _LOCATOR_SIZE:
        return None
    archive.seek(eocd_at - _LOCATOR_SIZE)
    locator = archive.read(_LOCATOR_SIZE)
    if locator[:4] != _ZIP64_LOCATOR:
        return None
    (offset,) = struct.unpack("<Q", locator[8:16])
    if offset > eocd_at:
        return None
    archive.seek(offset)
    record = archive.read(56)
    if len(record) < 56 or record[:4] != _ZIP64_EOCD:
        return None
    (total,) = struct.unpack("<Q", record[32:40])
    return int(total)


def check_archive_tail(archive: BinaryIO, size: int) -> None:
    """Refuse an archive whose central directory is absent, zip64 or too large (before parsing).

    A zip64 archive is never a skill archive (fewer than 30 MB, at most
    1000 entries); its own record's entry count is named when it breaks the
    bound (an archive of 100 000 entries is zip64).
    """
    tail_size = min(size, _EOCD_SIZE + _MAX_COMMENT)
    archive.seek(size - tail_size)
    tail = archive.read(tail_size)
    position = tail.rfind(_EOCD)
    if position < 0 or len(tail) - position < _EOCD_SIZE:
        raise UnsafeArchiveError("the skill archive is not a zip (no end of central directory)")
    disk, start_disk, here, total = struct.unpack("<HHHH", tail[position + 4 : position + 12])
    if 0xFFFF in (here, total):
        counted = _zip64_entries(archive, size - tail_size + position)
        if counted is not None and counted > MAX_SKILL_FILES:
            raise UnsafeArchiveError(
                f"the skill archive has {counted} entries, it must have 1 to {MAX_SKILL_FILES}"
            )
        raise UnsafeArchiveError("the skill archive is a zip64 archive (skill archives never are)")
    if disk or start_disk or here != total:
        raise UnsafeArchiveError("the skill archive spans several disks")
    if not 1 <= total <= MAX_SKILL_FILES:
        raise UnsafeArchiveError(
            f"the skill archive has {total} entries, it must have 1 to {MAX_SKILL_FILES}"
        )
    archive.seek(0)


def _name_problem(name: str, root: str) -> str | None:
    checks = (
        (not name, "an empty name"),
        ("\\" in name, "a backslash"),
        ("\0" in name, "a NUL character"),
        (name.startswith("/"), "an absolute path"),
        (name.endswith("/"), "a directory entry (the archive must hold files only)"),
        (
            posixpath.normpath(name) != name or "//" in name or ".." in name.split("/"),
            "a path that is not canonical (., .. or an empty segment)",
        ),
        (
            bool(root) and not name.startswith(root + "/"),
            f"a path outside the archive root {root + '/'!r}",
        ),
    )
    return next((reason for broken, reason in checks if broken), None)


def _entry(info: zipfile.ZipInfo, root: str) -> SkillEntry:
    name = info.filename
    if not info.flag_bits & _UTF8_FLAG and not name.isascii():
        raise UnsafeArchiveError(f"skill archive entry {name!r} does not have a UTF-8 name")
    problem = _name_problem(name, root)
    if problem is None and info.is_dir():
        problem = "a directory entry (the archive must hold files only)"
    if problem is not None:
        raise UnsafeArchiveError(f"skill archive entry {name!r} is unsafe: {problem}")
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if info.create_system == _UNIX and kind not in (0, stat.S_IFREG):
        what = "a symlink" if kind == stat.S_IFLNK else "not a regular file"
        raise UnsafeArchiveError(f"skill archive entry {name!r} is {what}")
    if info.flag_bits & _ENCRYPTED_FLAG:
        raise UnsafeArchiveError(f"skill archive entry {name!r} is encrypted")
    if info.compress_type not in _METHODS:
        raise UnsafeArchiveError(
            f"skill archive entry {name!r} uses compression method {info.compress_type} "
            "(only stored and deflated)"
        )
    executable = mode & 0o111 if info.create_system == _UNIX else 0
    path = name[len(root) + 1 :] if root else name
    return SkillEntry(path, info.file_size, 0o444 | executable, info)


def skill_entries(
    archive: zipfile.ZipFile, root: str, *, max_expanded: int = MAX_SKILL_EXPANDED_BYTES - 1
) -> list[SkillEntry]:
    """Every entry of ``archive``, checked (see the module); raise at the first that is not.

    ``root`` is the archive root every name lies below (``""``: none, an upload's top).
    """
    infos = archive.infolist()
    if not 1 <= len(infos) <= MAX_SKILL_FILES:
        raise UnsafeArchiveError(
            f"the skill archive has {len(infos)} entries, it must have 1 to {MAX_SKILL_FILES}"
        )
    entries: list[SkillEntry] = []
    seen: set[str] = set()
    total = 0
    for info in infos:
        entry = _entry(info, root)
        if entry.path in seen:
            raise UnsafeArchiveError(f"skill archive entry {info.filename!r} appears twice")
        seen.add(entry.path)
        total += entry.size
        if total > max_expanded:
            raise UnsafeArchiveError(
                f"the skill archive expands to more than {max_expanded} bytes "
                f"(at entry {info.filename!r})"
            )
        entries.append(entry)
    if SKILL_FILE not in seen:
        where = f"{root}/{SKILL_FILE}" if root else SKILL_FILE
        raise UnsafeArchiveError(f"the skill archive has no {where}")
    return entries


def frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines of a ``SKILL.md`` frontmatter block (empty if it has none)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        key, colon, value = line.partition(":")
        if colon and key.strip() and not key.startswith((" ", "\t")):
            fields[key.strip()] = value.strip().strip("\"'")
    return {}
