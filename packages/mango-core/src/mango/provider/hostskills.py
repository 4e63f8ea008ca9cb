"""Skill trees kept in a provider-owned host directory (kit helper).

A provider that bind-mounts a host directory read-only at
``/workspace/skills`` (Docker: ``<host dir>/skills``) keeps each pinned
skill there with :class:`HostSkillBundles`, which implements the contract of
:class:`~mango.domain.ports.SkillBundleSandbox` on the worker's side:

* **import** (exclusive lock): staging directories and archive copies an
  interrupted import left (``<state>/.mango-skill-*``) are removed first.
  The archive streams
  into ``<state>/.mango-skill-archive-<random>`` (never mounted), counted and
  hashed (:class:`ContentMismatch` for another size or SHA-256) and fsynced;
  its end-of-central-directory record and then every entry are checked
  (:mod:`mango.domain.skill_archives`; :class:`UnsafeArchiveError`). Each
  file is extracted into ``<state>/.mango-skill-<name>-<random>/`` (the
  state directory is never mounted, and is on the skills directory's
  filesystem, so nothing of a staging tree is ever visible in the sandbox and
  the rename is atomic): created
  exclusively, never through a link, its inflated bytes counted against its
  header and the running total against the mount's expanded size, fsynced,
  then ``0444`` plus its exec bits. The complete tree (the total equal to the
  expected one) is renamed onto ``<skills>/<name>`` in one step (a damaged
  tree there is first renamed aside into the state directory, so the runtime
  path shows the old tree, nothing, or the new one, never a part), the
  directory fsynced, and the marker
  (``<state>/skill-<sha256 of the runtime path>``, every field of the mount)
  written last.
* **has** (shared lock): the marker equals the mount's, and a walk of the
  tree finds a real directory, no symlink, every file regular with no write
  bit, no directory writable by group or others, ``SKILL.md`` at the top and
  the sizes adding up to exactly the expanded size. Anything else is False,
  so the next import repairs it (content is not hashed again).

:func:`observe_skill_imports` lets crash-injection tests stop the process
between the steps of an import (``extracted``: one file of the staging tree
is complete; ``published``: the tree is in place, its marker not yet written).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
import zipfile
from collections.abc import AsyncIterable, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Literal

import attrs

from mango.domain.errors import PermanentError, ProviderUnavailable, UnsafeArchiveError
from mango.domain.files import ContentCheck
from mango.domain.skill_archives import SKILL_FILE, SkillEntry, check_archive_tail, skill_entries
from mango.domain.skills import SkillMount
from mango.provider.hostdirs import remove_dir
from mango.provider.hostfiles import fsync_dir, resource_lock, write_all

__all__ = [
    "ARCHIVE_PREFIX",
    "DIRECTORY_MODE",
    "LOCK_TIMEOUT_SECONDS",
    "STAGING_PREFIX",
    "HostSkillBundles",
    "SkillImportStep",
    "observe_skill_imports",
]

DIRECTORY_MODE = 0o755
STAGING_PREFIX = ".mango-skill-"
"""Start of the names an import keeps in the state directory: staging trees, retired trees
and archive copies (all removed by the next import)."""
ARCHIVE_PREFIX = ".mango-skill-archive-"
"""Start of a verified archive copy's name in the state directory."""
LOCK_TIMEOUT_SECONDS = 600.0
_MARKER_TEMP = ".mango-marker-"
_CHUNK = 1024 * 1024

SkillImportStep = Literal["extracted", "published"]
_observers: list[Callable[[SkillImportStep, Path], None]] = []


def observe_skill_imports(observer: Callable[[SkillImportStep, Path], None]) -> Callable[[], None]:
    """Call ``observer(step, path)`` after each step of every skill import; return the undo.

    For crash-injection tests only.
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def _notify(step: SkillImportStep, path: Path) -> None:
    for observer in _observers:
        observer(step, path)


@attrs.frozen
class HostSkillBundles:
    """Skill trees below ``skills_root`` (mounted read-only); markers and lock in ``state_root``."""

    skills_root: Path
    state_root: Path
    lock_timeout: float = LOCK_TIMEOUT_SECONDS

    def lock(self, *, exclusive: bool) -> contextlib.AbstractAsyncContextManager[None]:
        """The resource lock (``<state>/.lock``, the one the File Resources use)."""
        return resource_lock(self.state_root, exclusive=exclusive, timeout=self.lock_timeout)

    def _target(self, mount: SkillMount) -> Path:
        return self.skills_root / mount.name

    def _marker(self, mount: SkillMount) -> Path:
        tag = hashlib.sha256(mount.runtime_path.encode()).hexdigest()
        return self.state_root / f"skill-{tag}"

    @contextlib.contextmanager
    def _host_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (PermanentError, UnsafeArchiveError):
            raise
        except OSError as exc:
            raise ProviderUnavailable(f"{what} under {self.skills_root.parent}: {exc}") from exc

    # ------------------------------------------------------------------ has

    async def has(self, mount: SkillMount) -> bool:
        """Whether ``mount``'s complete, read-only tree and its marker are in place."""
        return (await self.has_all([mount]))[0]

    async def has_all(self, mounts: Sequence[SkillMount]) -> list[bool]:
        """:meth:`has` for each of ``mounts``, in order, under one shared lock.

        False, too, when the state directory is missing (the caller's import
        then says why). One thread hop when the shared lock is free at once
        (the usual case before a tool step), else a wait for it.
        """
        if not mounts:
            return []
        found = await asyncio.to_thread(self._has_if_unlocked, mounts)
        if found is not None:
            return found
        async with self.lock(exclusive=False):
            return await asyncio.to_thread(lambda: [self._has(mount) for mount in mounts])

    def _has_if_unlocked(self, mounts: Sequence[SkillMount]) -> list[bool] | None:
        """``_has`` of each under the shared lock if no importer holds it now; None if one does."""
        try:
            fd = os.open(self.state_root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            return [False] * len(mounts)
        except OSError as exc:
            raise ProviderUnavailable(f"checking a skill under {self.state_root}: {exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            return [self._has(mount) for mount in mounts]
        finally:
            os.close(fd)

    def _has(self, mount: SkillMount) -> bool:
        with self._host_errors("checking a skill"):
            try:
                if self._marker(mount).read_bytes() != mount.marker():
                    return False
            except (FileNotFoundError, NotADirectoryError):
                return False
            return self._tree_intact(self._target(mount), mount.expanded_size)

    @staticmethod
    def _tree_intact(target: Path, expected: int) -> bool:
        total = 0
        pending = [target]
        while pending:
            directory = pending.pop()
            try:
                info = directory.lstat()
                if not stat.S_ISDIR(info.st_mode) or info.st_mode & 0o022:
                    return False
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                return False
            for entry in entries:
                found = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(found.st_mode):
                    pending.append(Path(entry.path))
                    continue
                if not stat.S_ISREG(found.st_mode) or found.st_mode & 0o222:
                    return False
                total += found.st_size
                if total > expected:
                    return False
        skill_file = (target / SKILL_FILE).lstat() if (target / SKILL_FILE).exists() else None
        return skill_file is not None and stat.S_ISREG(skill_file.st_mode) and total == expected

    # ------------------------------------------------------------------ import

    async def import_(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        """Verify, extract and publish ``mount``'s archive (see the module)."""
        async with self.lock(exclusive=True):
            await asyncio.to_thread(self._drop_abandoned)
            fd, archive = await asyncio.to_thread(self._archive_file)
            try:
                check = ContentCheck(
                    f"skill archive of {mount.name!r}", size=mount.size, sha256=mount.sha256
                )
                async for chunk in chunks:
                    check.update(chunk)
                    await asyncio.to_thread(write_all, fd, chunk)
                check.finish()
                await asyncio.to_thread(os.fsync, fd)
                await asyncio.to_thread(self._extract_and_publish, mount, fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    archive.unlink()
            await asyncio.to_thread(self._write_marker, mount)

    def _drop_abandoned(self) -> None:
        with self._host_errors("removing abandoned skill imports"):
            for entry in self.state_root.iterdir():
                if entry.name.startswith(STAGING_PREFIX):
                    remove_dir(entry)

    def _archive_file(self) -> tuple[int, Path]:
        with self._host_errors("storing a skill archive"):
            fd, name = tempfile.mkstemp(dir=self.state_root, prefix=ARCHIVE_PREFIX)
        return fd, Path(name)

    def _extract_and_publish(self, mount: SkillMount, fd: int) -> None:
        with self._host_errors("extracting a skill"), os.fdopen(os.dup(fd), "rb") as source:
            check_archive_tail(source, mount.size)
            try:
                archive = zipfile.ZipFile(source)
            except (zipfile.BadZipFile, ValueError, EOFError) as exc:
                raise UnsafeArchiveError(
                    f"skill {mount.name!r}: not a readable zip: {exc}"
                ) from None
            with archive:
                entries = skill_entries(
                    archive, mount.archive_root, max_expanded=mount.expanded_size
                )
                staging = Path(
                    tempfile.mkdtemp(dir=self.state_root, prefix=f"{STAGING_PREFIX}{mount.name}-")
                )
                try:
                    self._fill(archive, entries, staging, mount)
                    self._publish(staging, self._target(mount))
                except BaseException:
                    with contextlib.suppress(ProviderUnavailable):
                        remove_dir(staging)
                    raise
        _notify("published", self._target(mount))

    def _fill(
        self,
        archive: zipfile.ZipFile,
        entries: list[SkillEntry],
        staging: Path,
        mount: SkillMount,
    ) -> None:
        """Extract every entry into ``staging``; the total must be the expected size."""
        staging.chmod(DIRECTORY_MODE)
        total = 0
        for entry in entries:
            total += self._extract(archive, entry, staging, mount.expanded_size - total)
            _notify("extracted", staging)
        if total != mount.expanded_size:
            raise UnsafeArchiveError(
                f"skill {mount.name!r} expands to {total} bytes, {mount.expanded_size} expected"
            )

    @staticmethod
    def _extract(archive: zipfile.ZipFile, entry: SkillEntry, staging: Path, room: int) -> int:
        """Write one entry below ``staging``; its byte count (at most its size and ``room``)."""
        target = staging / entry.path
        current = staging
        for part in Path(entry.path).parent.parts:
            current = current / part
            with contextlib.suppress(FileExistsError):
                current.mkdir(mode=DIRECTORY_MODE)
            if not stat.S_ISDIR(current.lstat().st_mode):
                raise UnsafeArchiveError(
                    f"skill archive entry {entry.info.filename!r} nests a file"
                )
            current.chmod(DIRECTORY_MODE)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(target, flags, 0o600)
        written = 0
        bound = min(entry.size, room)
        try:
            stream: IO[bytes]
            try:
                with archive.open(entry.info) as stream:
                    while chunk := stream.read(_CHUNK):
                        written += len(chunk)
                        if written > bound:
                            raise UnsafeArchiveError(
                                f"skill archive entry {entry.info.filename!r} inflates past "
                                "its size or the skill's"
                            )
                        write_all(out, chunk)
            except (zipfile.BadZipFile, EOFError) as exc:
                raise UnsafeArchiveError(
                    f"skill archive entry {entry.info.filename!r} is damaged: {exc}"
                ) from None
            if written != entry.size:
                raise UnsafeArchiveError(
                    f"skill archive entry {entry.info.filename!r} has {written} bytes, "
                    f"{entry.size} declared"
                )
            os.fsync(out)
            os.fchmod(out, entry.mode)
        finally:
            os.close(out)
        return written

    def _publish(self, staging: Path, target: Path) -> None:
        for directory, _dirs, _files in os.walk(staging, topdown=False):
            fsync_dir(Path(directory))
        old: Path | None = None
        if os.path.lexists(target):
            old = self.state_root / f"{STAGING_PREFIX}old-{target.name}-{os.urandom(4).hex()}"
            target.rename(old)
        staging.rename(target)
        fsync_dir(self.skills_root)
        if old is not None:
            remove_dir(old)

    def _write_marker(self, mount: SkillMount) -> None:
        with self._host_errors("recording a skill"):
            fd, name = tempfile.mkstemp(dir=self.state_root, prefix=_MARKER_TEMP)
            try:
                write_all(fd, mount.marker())
                os.fsync(fd)
            finally:
                os.close(fd)
            Path(name).replace(self._marker(mount))
            fsync_dir(self.state_root)
