"""Path rules: pure, property-tested."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.domain import InvalidPathError, PathEscapeError, normalize_workspace_path
from mango.domain.paths import MAX_COMPONENT_BYTES, MAX_PATH_BYTES, split_workspace_path

component = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"),
    min_size=1,
    max_size=20,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(component, min_size=1, max_size=8))
def test_normal_paths_round_trip(parts: list[str]) -> None:
    """Joining valid components normalises to exactly those components."""
    path = "/".join(parts)
    assert normalize_workspace_path(path) == path


@given(st.lists(st.one_of(component, st.just("."), st.just("")), min_size=1, max_size=8))
def test_normalisation_is_idempotent_and_safe(parts: list[str]) -> None:
    """A normalised path never starts with '/', never holds '.' or '..', and is stable."""
    path = "/".join(parts)
    if path.startswith("/"):
        with pytest.raises(PathEscapeError):
            normalize_workspace_path(path)
        return
    try:
        normal = normalize_workspace_path(path)
    except InvalidPathError:
        # Nothing but the root, or a directory (a trailing '/' or '/.').
        assert not [p for p in parts if p not in ("", ".")] or parts[-1] in ("", ".")
        return
    assert not normal.startswith("/")
    assert "." not in normal.split("/")
    assert ".." not in normal.split("/")
    assert normalize_workspace_path(normal) == normal


@given(st.lists(component, max_size=4), st.lists(component, max_size=4))
def test_dotdot_anywhere_is_an_escape(before: list[str], after: list[str]) -> None:
    """Any '..' component is refused, even one that would stay inside."""
    with pytest.raises(PathEscapeError):
        normalize_workspace_path("/".join([*before, "..", *after]))


@given(st.lists(component, min_size=1, max_size=4))
def test_absolute_is_an_escape(parts: list[str]) -> None:
    """Absolute paths are refused, not re-rooted."""
    with pytest.raises(PathEscapeError):
        normalize_workspace_path("/" + "/".join(parts))


@given(st.integers(min_value=0, max_value=31) | st.just(127), component)
def test_control_characters_refused(code: int, name: str) -> None:
    """NUL and control characters are refused with InvalidPathError."""
    with pytest.raises(InvalidPathError) as info:
        normalize_workspace_path(name + chr(code))
    assert not isinstance(info.value, PathEscapeError)


def test_examples() -> None:
    """Folding of '.' and repeated slashes; a trailing slash names a directory, not a file."""
    assert normalize_workspace_path("./a//b/./c") == "a/b/c"
    assert split_workspace_path("a/b/", allow_root=True) == ("a", "b")
    for directory in ("notes.d/", "notes.d/.", "a//b//"):
        with pytest.raises(InvalidPathError, match="names a directory, not a file"):
            normalize_workspace_path(directory)
    assert split_workspace_path(".", allow_root=True) == ()
    with pytest.raises(InvalidPathError):
        normalize_workspace_path("")
    with pytest.raises(InvalidPathError):
        normalize_workspace_path("a\\b")


def test_length_limits() -> None:
    """Over-long components and paths are refused; the limits themselves pass."""
    assert normalize_workspace_path("x" * MAX_COMPONENT_BYTES)
    with pytest.raises(InvalidPathError):
        normalize_workspace_path("x" * (MAX_COMPONENT_BYTES + 1))
    with pytest.raises(InvalidPathError):
        normalize_workspace_path("é" * 128)  # 256 bytes in UTF-8
    long_path = "/".join(["y" * 100] * ((MAX_PATH_BYTES // 101) + 1))
    with pytest.raises(InvalidPathError):
        normalize_workspace_path(long_path)
