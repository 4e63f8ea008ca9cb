"""The ``file-api`` group: list, stat, exists, remove, rename, make a directory.

What :class:`~mango.provider.FileSystemSandbox` promises, each rule checked by
behaviour (a shell in the sandbox lays out the tree and looks at the result):

* **inspection**: ``stat`` does not follow the last component (a link is a
  link, with its own size), reports a file's exact size and permission bits,
  and an mtime near now; ``exists`` is True for a dangling link; a listing
  holds exactly the entries below the directory, sorted by path, links
  reported as links and never descended into, recursively or not; listing a
  link, a file or a missing path is refused with the contract's errors;
* **bounded listings**: at most ``limit`` entries, the first ``limit`` in path
  order, ``truncated`` exactly when more exist, and an out-of-range limit is
  :class:`InvalidInput`;
* **make_dir and remove**: ``parents`` as ``mkdir -p`` or not, existing
  destinations refused with :class:`PathExists`, a link removed and not its
  target, a non-empty directory kept whole without ``recursive``
  (:class:`DirectoryNotEmpty`), a recursive removal that never follows a link
  out;
* **rename**: moves a file, a directory and a link (the link itself), never
  onto an existing destination (:class:`PathExists`, both left as they were),
  a missing source or destination parent is :class:`FileNotFoundError`;
* **escapes**: every operation refuses ``..``, absolute paths and a parent
  that is a symlink (including one swapped in after an earlier call on the
  same path succeeded), and the workspace root is never removed, renamed or
  renamed onto.

The checks use only the protocol and the harness's shell (POSIX ``sh`` and
busybox ``ln``, ``mkdir``, ``chmod``, ``test``), so every provider runs them.
Each check makes one sandbox and lays out its whole tree with one command.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

import pytest

from mango.provider import (
    MAX_LIST_LIMIT,
    Capability,
    DirectoryNotEmpty,
    FileInfo,
    FileKind,
    FileSystemSandbox,
    InvalidInput,
    PathEscapeError,
    PathExists,
    PermanentError,
    Sandbox,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = ["FileApiChecks"]

_FILE_API = Capability.FILE_API.value
_LINK_TARGET = "/etc/passwd"
_CLOCK_SLACK = timedelta(hours=1)

INSPECTED_TREE = (
    "mkdir -p top/sub/deep top/empty keep && printf 12345 > top/five.txt && "
    "chmod 640 top/five.txt && printf x > top/sub/deep/x && printf k > keep/k && "
    'ln -s "$1" top/link && ln -s ../keep top/dirlink && ln -s missing-target top/dangling'
)
"""``sh -c INSPECTED_TREE sh LINK_TARGET``: the tree the inspection check lists and stats."""

INSPECTED_FLAT = {
    "top/dangling": FileKind.SYMLINK,
    "top/dirlink": FileKind.SYMLINK,
    "top/empty": FileKind.DIRECTORY,
    "top/five.txt": FileKind.FILE,
    "top/link": FileKind.SYMLINK,
    "top/sub": FileKind.DIRECTORY,
}
INSPECTED_DEEP = {
    **INSPECTED_FLAT,
    "top/sub/deep": FileKind.DIRECTORY,
    "top/sub/deep/x": FileKind.FILE,
}

MANY = (
    "mkdir -p many/dir && : > many/dir/inner && cd many && i=0; "
    'while [ "$i" -lt "$1" ]; do : > "f$i"; i=$((i + 1)); done'
)
"""``sh -c MANY sh COUNT``: ``many/dir/inner`` and ``many/f0`` .. ``many/f<COUNT-1>``."""
MANY_COUNT = 40

STATE = (
    'for p in "$@"; do if [ -L "$p" ]; then printf "%s=link " "$p"; '
    'elif [ -d "$p" ]; then printf "%s=dir " "$p"; elif [ -f "$p" ]; then '
    'printf "%s=file:%s " "$p" "$(cat "$p")"; else printf "%s=none " "$p"; fi; done'
)
"""Print each argument's kind as the shell sees it (never following a link), a file's content."""


class _FileApiSandbox(Sandbox, FileSystemSandbox, Protocol):
    """A sandbox with the file API (what a declaring provider hands out)."""


def _files(harness: Harness, sandbox: Sandbox) -> _FileApiSandbox:
    assert isinstance(sandbox, FileSystemSandbox), (
        f"{harness.name} declares {_FILE_API} but its sandbox is not a FileSystemSandbox"
    )
    return cast(_FileApiSandbox, sandbox)


def _layout(harness: Harness, script: str, *args: str) -> _FileApiSandbox:
    sandbox = harness.create()
    made = harness.sh(sandbox, script, *args)
    assert made.exit_code == 0, f"could not lay out the tree: {made.stderr[:300]!r}"
    return _files(harness, sandbox)


def _state(harness: Harness, sandbox: Sandbox, *paths: str) -> dict[str, str]:
    """What the shell sees at ``paths``: ``link``, ``dir``, ``none`` or ``file:<content>``."""
    shown = harness.sh(sandbox, STATE, *paths)
    assert shown.exit_code == 0, shown.stderr[:300]
    return dict(item.partition("=")[::2] for item in shown.stdout.decode().split())


def _kinds(entries: tuple[FileInfo, ...]) -> dict[str, FileKind]:
    return {entry.path: entry.kind for entry in entries}


def _refused(
    harness: Harness,
    error: type[BaseException],
    operation: Callable[..., Awaitable[Any]],
    *args: Any,
    **kwargs: Any,
) -> None:
    """``operation(*args, **kwargs)`` raises ``error`` (a mismatch names the call)."""
    shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    name = getattr(operation, "__name__", "operation")
    with pytest.raises(error):
        harness.run(operation(*args, **kwargs), f"{name}({shown})")


class FileApiChecks:
    """The ``file-api`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_FILE_API)
    def test_file_api_stat_exists_and_listing(self, conformance: Harness) -> None:
        """lstat semantics, exact sizes and modes, sorted listings that never follow a link."""
        files = _layout(conformance, INSPECTED_TREE, _LINK_TARGET)
        run = conformance.run
        five = run(files.stat("top/five.txt"))
        assert (five.path, five.name, five.kind, five.size) == (
            "top/five.txt",
            "five.txt",
            FileKind.FILE,
            5,
        ), five
        assert five.mode in (None, 0o640), f"mode {five.mode:o} after chmod 640"
        if five.mtime is not None:
            assert abs(datetime.now(UTC) - five.mtime) < _CLOCK_SLACK, (
                f"mtime {five.mtime.isoformat()} of a file written just now"
            )
        link = run(files.stat("top/link"))
        assert (link.kind, link.size) == (FileKind.SYMLINK, len(_LINK_TARGET)), (
            f"stat of a link to {_LINK_TARGET} must describe the link itself: {link}"
        )
        assert run(files.stat("top/dirlink")).kind is FileKind.SYMLINK
        assert run(files.stat("top/sub")).kind is FileKind.DIRECTORY
        for root in ("", "."):
            assert run(files.stat(root)).kind is FileKind.DIRECTORY, f"stat({root!r})"
        assert run(files.exists("top/dangling")), "a dangling link exists"
        assert run(files.exists("top/sub/deep/x"))
        assert not run(files.exists("top/nothing"))
        assert not run(files.exists("nothing/below"))
        _refused(conformance, FileNotFoundError, files.stat, "top/nothing")

        flat = run(files.list_dir("top"))
        assert [entry.path for entry in flat.entries] == sorted(INSPECTED_FLAT), flat
        assert _kinds(flat.entries) == INSPECTED_FLAT
        assert not flat.truncated
        listed_five = next(entry for entry in flat.entries if entry.path == "top/five.txt")
        assert (listed_five.name, listed_five.size) == ("five.txt", 5)
        deep = run(files.list_dir("top", recursive=True))
        assert [entry.path for entry in deep.entries] == sorted(INSPECTED_DEEP), (
            "a recursive listing has every entry below the directory, sorted by path, and "
            f"never what lies behind a link: {[entry.path for entry in deep.entries]}"
        )
        assert _kinds(deep.entries) == INSPECTED_DEEP
        top_level = run(files.list_dir(""))
        assert {entry.path for entry in top_level.entries} >= {"top", "keep"}
        assert [entry.path for entry in run(files.list_dir("top/empty")).entries] == []

        _refused(conformance, PathEscapeError, files.list_dir, "top/dirlink")
        _refused(conformance, PermanentError, files.list_dir, "top/five.txt")
        _refused(conformance, FileNotFoundError, files.list_dir, "top/nothing")

    @pytest.mark.mango_capability(_FILE_API)
    def test_file_api_listing_is_bounded(self, conformance: Harness) -> None:
        """The first ``limit`` entries in path order, ``truncated`` exactly when more exist."""
        files = _layout(conformance, MANY, str(MANY_COUNT))
        run = conformance.run
        everything = sorted(["many/dir", *(f"many/f{index}" for index in range(MANY_COUNT))])
        total = len(everything)
        for limit in (1, 7, total - 1):
            page = run(files.list_dir("many", limit=limit))
            assert [entry.path for entry in page.entries] == everything[:limit], (
                f"list_dir(limit={limit}) must return the first {limit} entries in path order"
            )
            assert page.truncated, f"list_dir(limit={limit}) of {total} entries"
        for limit in (total, total + 1):
            whole = run(files.list_dir("many", limit=limit))
            assert [entry.path for entry in whole.entries] == everything
            assert not whole.truncated, f"list_dir(limit={limit}) of {total} entries"
        deep = run(files.list_dir("many", recursive=True, limit=3))
        assert [entry.path for entry in deep.entries] == ["many/dir", "many/dir/inner", "many/f0"]
        assert deep.truncated, "a recursive listing stopped at its limit"
        whole_tree = run(files.list_dir("many", recursive=True, limit=total + 1))
        assert [entry.path for entry in whole_tree.entries] == sorted(
            [*everything, "many/dir/inner"]
        )
        assert not whole_tree.truncated
        for bad in (0, -1, MAX_LIST_LIMIT + 1):
            _refused(conformance, InvalidInput, files.list_dir, "", limit=bad)

    @pytest.mark.mango_capability(_FILE_API)
    def test_file_api_make_dir_and_remove(self, conformance: Harness) -> None:
        """mkdir with and without parents; remove a file, a link, a tree, never a link's target."""
        files = _layout(
            conformance,
            "mkdir -p keep full/inner && printf k > keep/k && printf f > full/inner/f && "
            "printf a > afile && ln -s ../keep full/out && ln -s ../keep/k full/kfile && "
            "ln -s keep dirlink && ln -s keep/k klink",
        )
        run = conformance.run
        run(files.make_dir("made/by/parents"))
        run(files.make_dir("made/by/parents"))  # an existing directory is success with parents
        assert _state(conformance, files, "made/by/parents") == {"made/by/parents": "dir"}
        run(files.make_dir("made/one", parents=False))
        assert run(files.stat("made/one")).kind is FileKind.DIRECTORY
        _refused(conformance, PathExists, files.make_dir, "made/one", parents=False)
        _refused(conformance, FileNotFoundError, files.make_dir, "no/parent", parents=False)
        for parents in (True, False):
            _refused(conformance, PathExists, files.make_dir, "afile", parents=parents)
        _refused(conformance, PathEscapeError, files.make_dir, "dirlink")
        _refused(conformance, PathEscapeError, files.make_dir, "dirlink/sub")

        run(files.remove("afile"))
        run(files.remove("klink"))
        run(files.remove("made/one"))
        _refused(conformance, DirectoryNotEmpty, files.remove, "full")
        assert _state(
            conformance, files, "afile", "klink", "keep/k", "made/one", "full/inner/f"
        ) == {
            "afile": "none",
            "klink": "none",
            "keep/k": "file:k",
            "made/one": "none",
            "full/inner/f": "file:f",
        }, "remove takes the entry itself (a link, not its target) and a refused one keeps all"
        run(files.remove("full", recursive=True))
        assert _state(conformance, files, "full", "keep", "keep/k", "dirlink") == {
            "full": "none",
            "keep": "dir",
            "keep/k": "file:k",
            "dirlink": "link",
        }, "a recursive removal must remove the links below it, never what they point at"
        _refused(conformance, FileNotFoundError, files.remove, "afile")
        run(files.remove("made", recursive=True))
        assert not run(files.exists("made"))

    @pytest.mark.mango_capability(_FILE_API)
    def test_file_api_rename(self, conformance: Harness) -> None:
        """Moves a file, a directory and a link itself; never onto an existing destination."""
        files = _layout(
            conformance,
            "mkdir -p src/dir dst && printf a > src/a && printf b > dst/b && printf d > src/dir/d "
            '&& ln -s "$1" src/link',
            _LINK_TARGET,
        )
        run = conformance.run
        run(files.rename("src/a", "dst/a2"))
        run(files.rename("src/dir", "dst/dir2"))
        run(files.rename("src/link", "dst/link2"))
        assert _state(
            conformance, files, "src/a", "dst/a2", "src/dir", "dst/dir2/d", "src/link", "dst/link2"
        ) == {
            "src/a": "none",
            "dst/a2": "file:a",
            "src/dir": "none",
            "dst/dir2/d": "file:d",
            "src/link": "none",
            "dst/link2": "link",
        }
        moved = conformance.sh(files, 'readlink "$1"', "dst/link2")
        assert moved.stdout.strip() == _LINK_TARGET.encode(), "the link must move, not its target"
        _refused(conformance, PathExists, files.rename, "dst/a2", "dst/b")
        _refused(conformance, PathExists, files.rename, "dst/b", "dst/dir2")
        _refused(conformance, FileNotFoundError, files.rename, "src/gone", "dst/x")
        _refused(conformance, FileNotFoundError, files.rename, "dst/b", "no/parent/b")
        assert _state(conformance, files, "dst/a2", "dst/b", "dst/dir2/d") == {
            "dst/a2": "file:a",
            "dst/b": "file:b",
            "dst/dir2/d": "file:d",
        }, "a refused rename must leave source and destination as they were"

    @pytest.mark.mango_capability(_FILE_API)
    def test_file_api_refuses_escapes_and_the_root(self, conformance: Harness) -> None:
        """``..``, absolute paths and parent links (even swapped in later) fail; the root stays."""
        files = _layout(
            conformance,
            "mkdir -p real/d && printf r > real/r && printf k > kept && ln -s /etc etc",
        )
        run = conformance.run
        assert run(files.stat("real/r")).size == 1
        assert [entry.path for entry in run(files.list_dir("real")).entries] == ["real/d", "real/r"]
        swapped = conformance.sh(files, "mv real moved && ln -s /etc real")
        assert swapped.exit_code == 0, swapped.stderr[:300]
        operations: dict[str, Callable[[str], Awaitable[Any]]] = {
            "list_dir": files.list_dir,
            "stat": files.stat,
            "exists": files.exists,
            "remove": lambda path: files.remove(path, recursive=True),
            "rename from": lambda path: files.rename(path, "renamed"),
            "rename to": lambda path: files.rename("kept", path),
            "make_dir": files.make_dir,
        }
        for path in ("../outside", "/etc/hostname", "etc/passwd", "real/passwd"):
            for name, operation in operations.items():
                with pytest.raises(PathEscapeError):
                    run(operation(path), f"{name}({path!r})")
        for root in ("", "."):
            _refused(conformance, PermanentError, files.remove, root, recursive=True)
            _refused(conformance, PermanentError, files.rename, root, "elsewhere")
            _refused(conformance, PermanentError, files.rename, "kept", root)
        assert _state(conformance, files, "kept", "moved/r", "renamed", "elsewhere") == {
            "kept": "file:k",
            "moved/r": "file:r",
            "renamed": "none",
            "elsewhere": "none",
        }, "a refused operation changed the workspace"
        assert run(files.stat("")).kind is FileKind.DIRECTORY


mark_checks(FileApiChecks, pytest.mark.mango_capability_group)
