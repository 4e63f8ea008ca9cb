"""A skill directory or zip, turned into its canonical archive (blocking; run in a thread).

The canonical archive is what every later step trusts and re-checks: a zip
of the skill's files only, sorted by path, all below ``<name>/``, each
deflated with a fixed timestamp and mode ``0644`` (``0755`` if the source
was executable), so the same tree always gives the same bytes (and so the
same SHA-256, which makes a repeated upload the same version).

* A **directory** must hold ``SKILL.md`` at its top; its files are read
  without following a symlink (a symlink, device, FIFO or socket anywhere is
  refused), at most 1000, fewer than 30 000 000 bytes in all.
* A **zip** is checked as every archive is
  (:func:`~mango.domain.skill_archives.skill_entries`), with one leniency of
  uploads only: its directory entries (``zip -r`` writes them) are dropped.
  Its files may sit below one top directory or at the top. Each entry's
  bytes are counted while they are inflated, so a header that lies about
  its size cannot inflate more than the bound.

The skill's name is the ``name:`` of ``SKILL.md``'s frontmatter, else the
directory's (or the zip's top directory's) name, lowercased with ``_`` as
``-``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs

from mango.domain.errors import InvalidInput, UnsafeArchiveError
from mango.domain.skill_archives import (
    SKILL_FILE,
    check_archive_tail,
    frontmatter,
    skill_entries,
)
from mango.domain.skills import (
    MAX_SKILL_ARCHIVE_BYTES,
    MAX_SKILL_EXPANDED_BYTES,
    MAX_SKILL_FILES,
    validate_skill_name,
)

__all__ = ["CanonicalSkill", "canonical_skill"]

_DATE = (1980, 1, 1, 0, 0, 0)
_CHUNK = 1024 * 1024
_MAX_DESCRIPTION = 1024


@attrs.frozen
class CanonicalSkill:
    """A canonical archive in a temporary file (the caller closes ``archive``)."""

    name: str
    description: str
    archive: IO[bytes] = attrs.field(eq=False, repr=False)
    size: int
    sha256: str
    expanded_size: int
    file_count: int


def _name(fields: dict[str, str], fallback: str) -> str:
    name = fields.get("name") or fallback.lower().replace("_", "-")
    return validate_skill_name(name)


def _description(fields: dict[str, str]) -> str:
    text = fields.get("description", "")
    return text.encode("utf-8")[:_MAX_DESCRIPTION].decode("utf-8", "ignore")


def _directory_files(root: Path) -> list[tuple[str, Path, bool]]:
    """``(relative path, path, executable)`` of every file below ``root``, refusing the rest."""
    found: list[tuple[str, Path, bool]] = []
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        for name in sorted(dirs) + sorted(files):
            path = here / name
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a regular file"
                raise UnsafeArchiveError(f"{relative!r} in skill directory {root} is {what}")
            found.append((relative, path, bool(info.st_mode & 0o111)))
            if len(found) > MAX_SKILL_FILES:
                raise UnsafeArchiveError(
                    f"skill directory {root} has more than {MAX_SKILL_FILES} files"
                )
    return sorted(found)


def _info(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.create_system = 3
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


class _Writer:
    """Writes the canonical archive, counting the expanded bytes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller
        self.zip = zipfile.ZipFile(self.file, "w", compression=zipfile.ZIP_DEFLATED)
        self.expanded = 0
        self.count = 0

    def add(self, path: str, chunks: Iterator[bytes], executable: bool) -> None:
        self.count += 1
        with self.zip.open(_info(f"{self.name}/{path}", executable), "w") as target:
            for chunk in chunks:
                self.expanded += len(chunk)
                if self.expanded >= MAX_SKILL_EXPANDED_BYTES:
                    raise UnsafeArchiveError(
                        f"skill {self.name!r} expands to {MAX_SKILL_EXPANDED_BYTES} bytes or "
                        f"more (at {path!r})"
                    )
                target.write(chunk)

    def finish(self, description: str) -> CanonicalSkill:
        self.zip.close()
        size = self.file.seek(0, os.SEEK_END)
        if size >= MAX_SKILL_ARCHIVE_BYTES:
            raise UnsafeArchiveError(
                f"skill {self.name!r}'s archive has {size} bytes, fewer than "
                f"{MAX_SKILL_ARCHIVE_BYTES} allowed"
            )
        self.file.seek(0)
        digest = hashlib.file_digest(self.file, "sha256").hexdigest()
        self.file.seek(0)
        return CanonicalSkill(
            self.name, description, self.file, size, digest, self.expanded, self.count
        )

    def discard(self) -> None:
        self.zip.close()
        self.file.close()


def _read_file(path: Path) -> Iterator[bytes]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as source:
        while chunk := source.read(_CHUNK):
            yield chunk


def _bounded(stream: IO[bytes], declared: int, what: str) -> Iterator[bytes]:
    """The entry's inflated bytes, never more than its header declared."""
    total = 0
    while chunk := stream.read(_CHUNK):
        total += len(chunk)
        if total > declared:
            raise UnsafeArchiveError(f"skill archive entry {what!r} inflates past its size")
        yield chunk
    if total != declared:
        raise UnsafeArchiveError(f"skill archive entry {what!r} is shorter than its size")


def _from_directory(root: Path) -> CanonicalSkill:
    files = _directory_files(root)
    if not any(relative == SKILL_FILE for relative, _, _ in files):
        raise InvalidInput(f"skill directory {root} has no {SKILL_FILE} at its top")
    head = (root / SKILL_FILE).read_bytes()[:65536].decode("utf-8", "replace")
    fields = frontmatter(head)
    writer = _Writer(_name(fields, root.resolve().name))
    try:
        for relative, path, executable in files:
            writer.add(relative, _read_file(path), executable)
        return writer.finish(_description(fields))
    except BaseException:
        writer.discard()
        raise


def _zip_root(archive: zipfile.ZipFile) -> str:
    names = [info.filename for info in archive.infolist() if not info.is_dir()]
    tops = {name.split("/", 1)[0] for name in names if "/" in name}
    if SKILL_FILE not in names and len(tops) == 1 and all("/" in name for name in names):
        return tops.pop()
    return ""


def _from_zip(path: Path) -> CanonicalSkill:
    with path.open("rb") as source:
        size = source.seek(0, os.SEEK_END)
        if size >= MAX_SKILL_ARCHIVE_BYTES:
            raise UnsafeArchiveError(
                f"{path} has {size} bytes; a skill archive has fewer than {MAX_SKILL_ARCHIVE_BYTES}"
            )
        check_archive_tail(source, size)
        try:
            archive = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, ValueError, EOFError) as exc:
            raise UnsafeArchiveError(f"{path} is not a readable zip: {exc}") from None
        with archive:
            return _canonical_zip(archive, path)


def _canonical_zip(archive: zipfile.ZipFile, path: Path) -> CanonicalSkill:
    root = _zip_root(archive)
    # Uploads only: the directory entries 'zip -r' writes carry nothing; every other rule holds.
    kept = [info for info in archive.infolist() if not (info.is_dir() and info.file_size == 0)]
    archive.filelist = kept
    entries = skill_entries(archive, root)
    with archive.open(next(e.info for e in entries if e.path == SKILL_FILE)) as head:
        fields = frontmatter(head.read(65536).decode("utf-8", "replace"))
    writer = _Writer(_name(fields, root or path.stem))
    try:
        for entry in sorted(entries, key=lambda e: e.path):
            with archive.open(entry.info) as stream:
                chunks = _bounded(stream, entry.size, entry.info.filename)
                writer.add(entry.path, chunks, entry.mode & 0o111 != 0)
        return writer.finish(_description(fields))
    except zipfile.BadZipFile as exc:
        writer.discard()
        raise UnsafeArchiveError(f"{path} is damaged: {exc}") from None
    except BaseException:
        writer.discard()
        raise


def canonical_skill(path: Path) -> CanonicalSkill:
    """The canonical archive of the skill directory or zip at ``path`` (see the module)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InvalidInput(f"{path} does not exist") from None
    if stat.S_ISDIR(info.st_mode):
        return _from_directory(path)
    if stat.S_ISREG(info.st_mode):
        return _from_zip(path)
    raise InvalidInput(f"{path} is neither a directory nor a zip file")
