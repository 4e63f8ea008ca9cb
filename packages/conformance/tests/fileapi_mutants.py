"""Mutants of the local provider's file API (capability ``file-api``), one broken rule each.

``test_mutants.test_file_api_mutants_are_caught`` runs the file-api group
against each (through :func:`conformance_mutants.target_for`) and against the
two controls, which must pass it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from conformance_mutants import WrappedProvider, WrappedSandbox
from mango.domain.errors import PathEscapeError
from mango.domain.sandbox_ports import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    DirectoryListing,
    FileInfo,
    FileKind,
)
from mango.local.fileapi import file_info
from mango.provider import ExecFileSystem

__all__ = ["FILE_API_MUTANTS"]


class _FileApiSandbox(WrappedSandbox):
    """A wrapped local sandbox that can reach its own host paths."""

    def host(self, path: str) -> Path:
        return Path(self.root, *[part for part in path.split("/") if part not in ("", ".")])

    async def _inner(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)


class StatFollowsLinksSandbox(_FileApiSandbox):
    """``stat`` and ``exists`` follow a last-component link (os.stat, os.path.exists)."""

    async def stat(self, path: str) -> FileInfo:
        info: FileInfo = await self._inner("stat", path)
        if info.kind is not FileKind.SYMLINK:
            return info
        return file_info(info.path, await asyncio.to_thread(os.stat, self.host(path)))

    async def exists(self, path: str) -> bool:
        await self._inner("exists", path)  # the escape checks still run
        return await asyncio.to_thread(os.path.exists, self.host(path))


class ListingFollowsLinksSandbox(_FileApiSandbox):
    """A recursive listing descends into links to directories."""

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        listing: DirectoryListing = await self._inner(
            "list_dir", path, recursive=recursive, limit=limit
        )
        if not recursive:
            return listing
        extra = []
        for entry in listing.entries:
            target = self.host(entry.path)
            if entry.kind is FileKind.SYMLINK and await asyncio.to_thread(target.is_dir):
                for name in await asyncio.to_thread(os.listdir, target):
                    child = f"{entry.path}/{name}"
                    extra.append(file_info(child, os.lstat(self.host(child))))
        entries = sorted([*listing.entries, *extra], key=lambda info: info.path)
        return DirectoryListing(tuple(entries[:limit]), truncated=len(entries) > limit)


class UnboundedListingSandbox(_FileApiSandbox):
    """``limit`` is ignored: every entry comes back, never truncated."""

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        del limit
        listing: DirectoryListing = await self._inner(
            "list_dir", path, recursive=recursive, limit=MAX_LIST_LIMIT
        )
        return DirectoryListing(listing.entries)


class LastEntriesListingSandbox(_FileApiSandbox):
    """A truncated listing keeps the last entries, not the first (a cut in read order)."""

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        listing: DirectoryListing = await self._inner(
            "list_dir", path, recursive=recursive, limit=MAX_LIST_LIMIT
        )
        entries = listing.entries
        return DirectoryListing(entries[-limit:], truncated=len(entries) > limit)


class RemoveIgnoresRecursiveSandbox(_FileApiSandbox):
    """A non-recursive removal of a non-empty directory removes its whole tree."""

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        del recursive
        await self._inner("remove", path, recursive=True)


class RemoveFollowsLinksSandbox(_FileApiSandbox):
    """A recursive removal also empties the directories that links below it point at."""

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        if recursive and (await self._inner("stat", path)).kind is FileKind.DIRECTORY:
            await asyncio.to_thread(_empty_link_targets, self.host(path))
        await self._inner("remove", path, recursive=recursive)


def _empty_link_targets(top: Path) -> None:
    for where, dirs, files in os.walk(top):
        for name in dirs + files:
            link = Path(where, name)
            if link.is_symlink() and link.is_dir():
                for inner in link.iterdir():
                    inner.unlink()


class RenameReplacesSandbox(_FileApiSandbox):
    """A rename replaces an existing destination (``os.replace``) instead of refusing."""

    async def rename(self, source: str, destination: str) -> None:
        await self._inner("stat", source)
        target = self.host(destination)
        if await asyncio.to_thread(target.is_dir) and not target.is_symlink():
            await asyncio.to_thread(shutil.rmtree, target)
        await asyncio.to_thread(os.replace, self.host(source), target)


class MakeDirAlwaysParentsSandbox(_FileApiSandbox):
    """``parents=False`` is ignored: ``make_dir`` always behaves as ``mkdir -p``."""

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        del parents
        await self._inner("make_dir", path, parents=True)


class ParentLinksFollowedSandbox(_FileApiSandbox):
    """Inspection resolves the path on the host, following a link in a parent."""

    async def stat(self, path: str) -> FileInfo:
        try:
            return await self._inner("stat", path)  # type: ignore[no-any-return]
        except PathEscapeError:
            if path.startswith("/") or ".." in path.split("/"):
                raise
        return file_info(path, await asyncio.to_thread(os.lstat, self.host(path)))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except FileNotFoundError:
            return False
        return True


class RootRemovableSandbox(_FileApiSandbox):
    """Removing the root (``""`` or ``"."``) empties the workspace instead of refusing."""

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        if path.strip(".") != "":
            await self._inner("remove", path, recursive=recursive)
            return
        listing: DirectoryListing = await self._inner("list_dir", "")
        for entry in listing.entries:
            await self._inner("remove", entry.path, recursive=True)


class ClampedLimitSandbox(_FileApiSandbox):
    """A listing limit out of range is clamped into it instead of refused."""

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        clamped = min(max(limit, 1), MAX_LIST_LIMIT)
        return await self._inner("list_dir", path, recursive=recursive, limit=clamped)  # type: ignore[no-any-return]


class ModeWithTypeBitsSandbox(_FileApiSandbox):
    """``mode`` is the whole ``st_mode`` (type bits included), not the permission bits."""

    async def stat(self, path: str) -> FileInfo:
        info: FileInfo = await self._inner("stat", path)
        raw = (await asyncio.to_thread(os.lstat, self.host(path))).st_mode
        return attrs.evolve(info, mode=raw)


class MtimeAtEpochSandbox(_FileApiSandbox):
    """``mtime`` is reported as the epoch (a backend field read wrongly)."""

    async def stat(self, path: str) -> FileInfo:
        info: FileInfo = await self._inner("stat", path)
        return attrs.evolve(info, mtime=datetime.fromtimestamp(0, UTC))


class MakeDirThroughLinksSandbox(_FileApiSandbox):
    """``make_dir`` of a link to a directory is success, and below it follows the link."""

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        try:
            await self._inner("make_dir", path, parents=parents)
        except PathEscapeError:
            await asyncio.to_thread(self.host(path).mkdir, parents=parents, exist_ok=parents)


class ExecFileApiSandbox(ExecFileSystem, WrappedSandbox):
    """Not a mutant: the local sandbox with the kit's exec fallback instead of its own file API.

    It must pass every file-api check, as the local provider's native one does.
    """


def _file_api_mutant(sandbox_class: type[WrappedSandbox]) -> type[WrappedProvider]:
    return type(
        sandbox_class.__name__.removesuffix("Sandbox"),
        (WrappedProvider,),
        {"sandbox_class": sandbox_class, "__doc__": sandbox_class.__doc__},
    )


FILE_API_MUTANTS: dict[str, type[WrappedProvider]] = {
    "stat-follows-links": _file_api_mutant(StatFollowsLinksSandbox),
    "listing-follows-links": _file_api_mutant(ListingFollowsLinksSandbox),
    "listing-unbounded": _file_api_mutant(UnboundedListingSandbox),
    "listing-keeps-the-last": _file_api_mutant(LastEntriesListingSandbox),
    "remove-ignores-recursive": _file_api_mutant(RemoveIgnoresRecursiveSandbox),
    "remove-follows-links": _file_api_mutant(RemoveFollowsLinksSandbox),
    "rename-replaces": _file_api_mutant(RenameReplacesSandbox),
    "make-dir-always-parents": _file_api_mutant(MakeDirAlwaysParentsSandbox),
    "parent-links-followed": _file_api_mutant(ParentLinksFollowedSandbox),
    "root-removable": _file_api_mutant(RootRemovableSandbox),
    "listing-clamps-limits": _file_api_mutant(ClampedLimitSandbox),
    "mode-with-type-bits": _file_api_mutant(ModeWithTypeBitsSandbox),
    "mtime-at-epoch": _file_api_mutant(MtimeAtEpochSandbox),
    "make-dir-through-links": _file_api_mutant(MakeDirThroughLinksSandbox),
    "file-api-unchanged": WrappedProvider,
    "file-api-through-exec": _file_api_mutant(ExecFileApiSandbox),
}
"""The file-api mutants of the local provider; ``file-api-unchanged`` and
``file-api-through-exec`` (the kit's fallback over local exec) are controls."""
