"""The kit's RemoteFileSystem: what it adds to a daemon's listing, whatever the daemon.

The behaviour over real daemons (every rule of the contract) is the
conformance group's, run against the four remote fakes; here the listing
itself is a generator the test controls, so the bound can be checked where
no fake could show it: how much of a huge listing is held and read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from mango.provider import (
    MAX_LIST_LIMIT,
    Entry,
    EntryKind,
    FileKind,
    InvalidInput,
    PathPolicy,
    ProtocolError,
)
from mango.provider.filesystem import NativeEntry, RemoteFileSystem

ROOT = "/workspace"
COUNT = 20_000


class Listed(RemoteFileSystem):
    """A daemon whose one directory ``big`` holds ``names`` (yielded in the given order)."""

    def __init__(self, names: list[str], *, in_order: bool = False, describe: bool = False) -> None:
        self._path_policy = PathPolicy(ROOT, control_dirs=(f"{ROOT}/.control",))
        self._max_read_bytes = 1024
        self.names = names
        self.read = 0
        self.described: list[int] = []
        self.sorted_listing = in_order
        self.describe = describe

    async def _stat(self, path: str) -> Entry | None:
        return Entry(EntryKind.DIRECTORY)

    async def _entry_info(self, path: str) -> NativeEntry | None:
        return NativeEntry(path, EntryKind.DIRECTORY)

    @asynccontextmanager
    async def _listing(
        self, path: str, *, recursive: bool
    ) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        async def entries() -> AsyncIterator[NativeEntry]:
            for name in self.names:
                self.read += 1
                kind = EntryKind.OTHER if self.describe else EntryKind.REGULAR
                yield NativeEntry(f"{path}/{name}", kind, size=1)

        yield entries()

    async def _describe(self, entries: list[NativeEntry]) -> list[NativeEntry | None]:
        if not self.describe:
            return list(entries)
        self.described.append(len(entries))
        return [NativeEntry(entry.path, EntryKind.REGULAR, size=2) for entry in entries]


def _names(count: int) -> list[str]:
    return [f"f{index:06d}" for index in range(count)]


async def test_a_huge_listing_keeps_the_first_entries_by_path_whatever_the_order() -> None:
    """Read in reverse order, the listing still holds the first ``limit`` paths, truncated."""
    files = Listed(list(reversed(_names(COUNT))))
    listing = await files.list_dir("big", limit=5)
    assert [entry.path for entry in listing.entries] == [f"big/{n}" for n in _names(5)]
    assert listing.truncated
    assert files.read == COUNT  # an unordered listing is read to its end, holding five
    assert {entry.kind for entry in listing.entries} == {FileKind.FILE}


async def test_a_listing_in_name_order_is_read_no_further_than_the_limit() -> None:
    """A daemon whose one-level listing is in name order is read ``limit + 1`` entries deep."""
    files = Listed(_names(COUNT), in_order=True)
    listing = await files.list_dir("big", limit=7)
    assert [entry.name for entry in listing.entries] == _names(7)
    assert (listing.truncated, files.read) == (True, 8)
    whole = await Listed(_names(7), in_order=True).list_dir("big", limit=7)
    assert (len(whole.entries), whole.truncated) == (7, False)


async def test_only_the_kept_entries_are_described() -> None:
    """A listing that names entries without describing them describes at most ``limit``."""
    files = Listed(_names(300), describe=True)
    listing = await files.list_dir("big", limit=10)
    assert files.described == [10]
    assert {(entry.kind, entry.size) for entry in listing.entries} == {(FileKind.FILE, 2)}


async def test_control_directories_never_show_and_strays_are_protocol_errors() -> None:
    """The adapter's control directory is left out; an entry not below the directory is refused."""
    files = Listed([".control", ".control-not", "a"])
    listed = [entry.path for entry in (await files.list_dir("")).entries]
    assert listed == [".control-not", "a"]  # /workspace/.control is the adapter's
    below = [entry.path for entry in (await files.list_dir("big")).entries]
    assert below == ["big/.control", "big/.control-not", "big/a"]  # only the root's is
    for stray in ("../escape", "a//b", "x/../../y"):
        with pytest.raises(ProtocolError):
            await Listed([stray]).list_dir("big")
    with pytest.raises(ProtocolError):  # a one-level listing that descends
        await Listed(["a/b"]).list_dir("big")


@pytest.mark.parametrize("limit", [0, -1, MAX_LIST_LIMIT + 1, True, 2.0, "5"])
async def test_a_bad_limit_is_refused_before_any_call(limit: object) -> None:
    """Out of range or not an int: InvalidInput, and the daemon is never asked."""
    files = Listed(_names(3))
    with pytest.raises(InvalidInput):
        await files.list_dir("big", limit=limit)  # type: ignore[arg-type]
    assert files.read == 0
