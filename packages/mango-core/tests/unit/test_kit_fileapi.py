"""The provider kit's file-API helpers: the first entries of a listing, the fallback's parse."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.domain.errors import InvalidInput, ProviderUnavailable
from mango.provider import FileInfo, FileKind, FirstEntries
from mango.provider.fileapi import _info

_NAMES = st.text(alphabet="ab/-.z", min_size=1, max_size=6)


def _entry(path: str) -> FileInfo:
    return FileInfo(path=path, name=path.rsplit("/", 1)[-1], kind=FileKind.FILE, size=0)


@given(st.lists(_NAMES, unique=True, max_size=40), st.integers(1, 45), st.randoms())
def test_first_entries_are_the_sorted_prefix_in_any_order(
    paths: list[str], limit: int, order: object
) -> None:
    """Whatever order the entries come in, the listing is the first ``limit`` by path."""
    shuffled = list(paths)
    order.shuffle(shuffled)  # type: ignore[attr-defined]
    kept = FirstEntries(limit)
    for path in shuffled:
        kept.offer(_entry(path))
    listing = kept.listing()
    assert [entry.path for entry in listing.entries] == sorted(paths)[:limit]
    assert listing.truncated == (len(paths) > limit)


def test_a_skipped_subtree_marks_the_listing_truncated() -> None:
    """could_keep says when a subtree cannot hold a keepable entry; skipping it truncates."""
    kept = FirstEntries(1)
    kept.offer(_entry("a"))
    assert not kept.could_keep("b/")
    kept.mark_truncated()
    assert kept.listing().truncated


@pytest.mark.parametrize("limit", [0, -1, 100_001, True])
def test_first_entries_refuse_a_bad_limit(limit: int) -> None:
    """The limit is checked as list_dir's is."""
    with pytest.raises(InvalidInput):
        FirstEntries(limit)


@pytest.mark.parametrize(
    ("fields", "kind", "mode"),
    [
        ("81a4 5 1700000000", FileKind.FILE, 0o644),
        ("41ed 4096 1700000000", FileKind.DIRECTORY, 0o755),
        ("a1ff 11 1700000000", FileKind.SYMLINK, 0o777),
        ("11a4 0 1700000000", FileKind.OTHER, 0o644),
        ("c1ed 0 1700000000", FileKind.OTHER, 0o755),
    ],
)
def test_stat_fields_parse_to_file_info(fields: str, kind: FileKind, mode: int) -> None:
    """``stat -c '%f %s %Y'`` (hex mode, size, epoch mtime) becomes a FileInfo."""
    info = _info("d/x", fields)
    assert (info.name, info.kind, info.mode) == ("x", kind, mode)
    assert info.mtime == datetime.fromtimestamp(1_700_000_000, UTC)


@pytest.mark.parametrize("fields", ["", "zz 1 2", "81a4 five 1", "81a4 1"])
def test_unparsable_stat_fields_are_provider_unavailable(fields: str) -> None:
    """An answer that is not stat's is the sandbox answering badly, never a crash."""
    with pytest.raises(ProviderUnavailable):
        _info("x", fields)
