"""The file API (capability ``file-api``) for a provider that has exec and nothing more.

:class:`ExecFileSystem` is a mixin for a sandbox class: it implements
:class:`~mango.domain.sandbox_ports.FileSystemSandbox` with one command per
operation, run through the sandbox's own ``exec`` as ``sh -c SCRIPT sh OP
ROOT ARG...``. Paths travel as separate argv elements, never inside the
script (a remote provider turns the argv into one line with
:func:`mango.provider.shell.command_line`, whose quoting is proven once), so
no name can inject shell syntax.

What the sandbox needs: a POSIX ``sh`` and busybox-level ``cd -P``, ``pwd
-P``, ``test``, ``stat -c`` (``%f %s %Y``), ``find`` (``-mindepth``,
``-maxdepth``, ``-prune``, ``-exec ... {} +``), ``sort -t -k``, ``head -n``,
``mkdir``, ``rmdir``, ``rm -rf``, ``mv -n -T`` and ``ls -A``: every busybox
and coreutils image has them.

The path rules are the workspace's (:class:`~mango.provider.paths.PathPolicy`
for the lexical part, in Python, before any command). In the sandbox, the
script enters the target's parent one component at a time from the root:
each component must be a directory and no symlink (``test -L``), and after
each ``cd -P`` the shell's real working directory (``pwd -P``) must be
exactly the expected one, so a component swapped for a link between the test
and the ``cd`` is caught; the last component is then acted on relative to
that working directory (``rm``, ``rmdir``, ``mkdir`` and ``mv`` never follow
it), which a later swap of a parent cannot redirect. A rename's destination
is reached by the absolute path of its checked parent, so a command racing it
could move the entry to another place inside the same sandbox, never out.

Listings run ``find`` (which never follows links), sort by path in byte order
and keep the first ``limit + 1`` lines in the sandbox (``head``): the
provider reads at most that, within the exec output cap (a listing whose
lines outgrow the cap returns the entries that fit, ``truncated``). Entries
whose name holds a newline (which no path of the file API can name) are left
out, with what lies below them.
"""

from __future__ import annotations

import heapq
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mango.domain.errors import (
    DirectoryNotEmpty,
    InvalidInput,
    InvalidPathError,
    PathEscapeError,
    PathExists,
    PermanentError,
    ProviderUnavailable,
)
from mango.domain.sandbox_ports import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    DirectoryListing,
    FileInfo,
    FileKind,
)
from mango.domain.values import Command, ExecResult
from mango.provider.paths import Location, PathPolicy, file_not_found

__all__ = ["FILE_API_SCRIPT", "ExecFileSystem", "FirstEntries", "check_list_limit", "refuse_root"]

FILE_API_SCRIPT = r"""op=$1 root=$2; shift 2
tab=$(printf '\t')
nl='
'
fail() { printf '%s\n' "$2" >&2; exit "$1"; }
# Enter the directory $1 (relative, "" for the root) from the root, one component
# at a time: each must be a directory and not a link, and pwd -P must be what it should.
enter() {
  cd -P -- "$root" 2>/dev/null || fail 20 "$root"
  here=$(pwd -P)
  [ -z "$1" ] && return 0
  set -f; old_ifs=$IFS; IFS=/
  for c in $1; do
    IFS=$old_ifs
    [ -L "$c" ] && fail 11 "$c"
    [ -e "$c" ] || fail 10 "$c"
    [ -d "$c" ] || fail 12 "$c"
    cd -P -- "$c" 2>/dev/null || fail 10 "$c"
    here="${here%/}/$c"
    [ "$(pwd -P)" = "$here" ] || fail 11 "$c"
  done
  IFS=$old_ifs; set +f
}
# Like enter, making each missing component first (mkdir -p).
enter_making() {
  cd -P -- "$root" 2>/dev/null || fail 20 "$root"
  here=$(pwd -P)
  set -f; old_ifs=$IFS; IFS=/
  for c in $1; do
    IFS=$old_ifs
    [ -e "$c" ] || [ -L "$c" ] || mkdir -- "$c" 2>/dev/null || [ -d "$c" ] || fail 15 "$c"
    [ -L "$c" ] && fail 11 "$c"
    [ -d "$c" ] || fail 12 "$c"
    cd -P -- "$c" 2>/dev/null || fail 10 "$c"
    here="${here%/}/$c"
    [ "$(pwd -P)" = "$here" ] || fail 11 "$c"
  done
  IFS=$old_ifs; set +f
}
present() { [ -e "$1" ] || [ -L "$1" ]; }
case $op in
stat)
  enter "$1"
  if [ -z "$2" ]; then stat -c '%f %s %Y' .; exit; fi
  present "$2" || fail 10 "$2"
  stat -c '%f %s %Y' -- "$2" ;;
list)
  enter "$1"
  if [ "$2" = 1 ]; then depth=; else depth='-maxdepth 1'; fi
  # shellcheck disable=SC2086
  find . -mindepth 1 $depth \( -name "*$nl*" -prune \) -o \
    -exec stat -c "%n$tab%f %s %Y" -- {} + | LC_ALL=C sort -t "$tab" -k1,1 | head -n "$3" ;;
remove)
  enter "$1"
  present "$2" || fail 10 "$2"
  if [ -d "$2" ] && [ ! -L "$2" ]; then
    if [ "$3" = 1 ]; then rm -rf -- "$2" || fail 15 "$2"
    elif ! rmdir -- "$2" 2>/dev/null; then
      [ -n "$(ls -A -- "$2" 2>/dev/null)" ] && fail 14 "$2"
      fail 15 "$2"
    fi
  else
    rm -f -- "$2" || fail 15 "$2"
  fi ;;
rename)
  enter "$3"; to=$here
  enter "$1"
  present "$2" || fail 10 "$2"
  present "$to/$4" && fail 13 "$4"
  mv -n -T -- "$2" "$to/$4" 2>/dev/null || fail 15 "$2"
  present "$2" && fail 13 "$4"
  : ;;
replace)
  enter "$1"
  present "$2" || fail 10 "$2"
  [ -L "$3" ] && fail 11 "$3"
  mv -f -T -- "$2" "$3" 2>/dev/null || fail 15 "$3" ;;
mkdir)
  if [ "$3" = 1 ]; then enter_making "$1"; else enter "$1"; fi
  if [ -L "$2" ]; then fail 11 "$2"; fi
  if mkdir -- "$2" 2>/dev/null; then exit 0; fi
  [ -L "$2" ] && fail 11 "$2"
  [ "$3" = 1 ] && [ -d "$2" ] && exit 0
  present "$2" && fail 13 "$2"
  fail 15 "$2" ;;
*) fail 15 "unknown operation $op" ;;
esac
"""
"""``sh -c FILE_API_SCRIPT sh OP ROOT ARG...``: one file-API operation (see the module).

Exit codes: 10 missing, 11 a symlink on the way, 12 not a directory, 13 the
destination exists, 14 a directory not empty, 15 the operation failed, 20 the
workspace root is gone; stderr's last line names the component.
"""

_MISSING, _LINK, _NOT_DIR, _EXISTS, _NOT_EMPTY, _FAILED, _NO_ROOT = 10, 11, 12, 13, 14, 15, 20


def check_list_limit(limit: object) -> int:
    """``limit`` as a listing bound: an int from 1 to :data:`MAX_LIST_LIMIT`, else InvalidInput."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"a listing limit must be an integer from 1 to {MAX_LIST_LIMIT}")
    return limit


class _Kept:
    """A heap item ordered in reverse, so the heap's top is the largest path kept."""

    __slots__ = ("info",)

    def __init__(self, info: FileInfo) -> None:
        self.info = info

    def __lt__(self, other: _Kept) -> bool:
        return self.info.path > other.info.path


class FirstEntries:
    """The first ``limit`` entries by path among those offered, in O(limit) memory.

    For a backend that reads a directory in its own order (``os.scandir``, a
    vendor's paged listing): offer every entry, then :meth:`listing` is the
    contract's bounded, sorted :class:`DirectoryListing`, ``truncated`` if any
    entry was left out.
    """

    def __init__(self, limit: int) -> None:
        self.limit = check_list_limit(limit)
        self._heap: list[_Kept] = []
        self._truncated = False

    def could_keep(self, path: str) -> bool:
        """Whether an entry at ``path`` (or below it: longer, so larger) could still be kept."""
        return len(self._heap) < self.limit or path < self._heap[0].info.path

    def offer(self, info: FileInfo) -> None:
        """Keep ``info`` if it is among the first ``limit`` seen so far."""
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, _Kept(info))
            return
        self._truncated = True
        if info.path < self._heap[0].info.path:
            heapq.heapreplace(self._heap, _Kept(info))

    def mark_truncated(self) -> None:
        """Entries exist that were never offered (a subtree skipped as too large to keep)."""
        self._truncated = True

    def listing(self) -> DirectoryListing:
        """The kept entries, sorted by path."""
        entries = sorted((kept.info for kept in self._heap), key=lambda info: info.path)
        return DirectoryListing(tuple(entries), truncated=self._truncated)


def _kind(mode: int) -> FileKind:
    kind = (mode >> 12) & 0o17
    return {0o10: FileKind.FILE, 0o04: FileKind.DIRECTORY, 0o12: FileKind.SYMLINK}.get(
        kind, FileKind.OTHER
    )


def _info(path: str, fields: str) -> FileInfo:
    """A :class:`FileInfo` from ``stat -c '%f %s %Y'`` output (hex mode, size, mtime)."""
    try:
        raw_mode, size, mtime = fields.split()
        mode = int(raw_mode, 16)
        return FileInfo(
            path=path,
            name=path.rsplit("/", 1)[-1],
            kind=_kind(mode),
            size=int(size),
            mode=mode & 0o7777,
            mtime=datetime.fromtimestamp(int(mtime), UTC),
        )
    except (ValueError, OverflowError, OSError):
        raise ProviderUnavailable(f"the sandbox's stat answered {fields[:200]!r}") from None


def _joined(parts: tuple[str, ...]) -> str:
    return "/".join(parts)


class ExecFileSystem:
    """Mixin: the file API through the sandbox's ``exec`` (see the module).

    The class it is mixed into provides ``exec(command)`` and ``root`` (the
    workspace's absolute path in the sandbox), as every
    :class:`~mango.domain.ports.Sandbox` does. Override :attr:`file_api_shell`
    for a sandbox whose shell is not ``/bin/sh``.
    """

    file_api_shell: str = "/bin/sh"
    """The POSIX shell the operations run with."""

    if TYPE_CHECKING:  # what the sandbox class provides

        @property
        def root(self) -> str: ...

        async def exec(self, command: Command) -> ExecResult: ...

    def _file_api_policy(self) -> PathPolicy:
        return PathPolicy(self.root)

    def _locate(self, path: str, *, write: bool = False) -> Location:
        return self._file_api_policy().locate(path, write=write, directory=True)

    async def _file_api(
        self, path: str, op: str, *args: str, root: str | None = None
    ) -> ExecResult:
        """Run one operation; return its result, or raise the error its exit code names.

        ``root`` is the directory the operation's relative paths start from
        (default: the workspace root; an extra root such as the outputs mount
        for a path below it).
        """
        base = self.root if root is None else root
        argv = (self.file_api_shell, "-c", FILE_API_SCRIPT, "sh", op, base, *args)
        result = await self.exec(Command(argv))
        if result.exit_code != 0:
            detail = result.stderr.decode("utf-8", "replace").strip().rsplit("\n", 1)[-1]
            raise _error(result, path, detail)
        return result

    async def _stat_fields(self, path: str, parent: str, name: str) -> str:
        result = await self._file_api(path, "stat", parent, name)
        return result.stdout.decode("utf-8", "replace")

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        """The first ``limit`` entries below the directory ``path``, sorted by path."""
        check_list_limit(limit)
        location = self._locate(path)
        base = _joined(location.parts)
        result = await self._file_api(path, "list", base, "1" if recursive else "0", str(limit + 1))
        # The last piece is the empty tail after the final newline, or a line the cap cut.
        lines = result.stdout.decode("utf-8", "surrogateescape").split("\n")[:-1]
        entries: list[FileInfo] = []
        for line in lines[:limit]:
            name, _, fields = line.rpartition("\t")  # a name may hold a tab; the fields never
            relative = name.removeprefix("./")
            entries.append(_info(f"{base}/{relative}" if base else relative, fields))
        truncated = len(lines) > limit or result.stdout_truncated
        return DirectoryListing(tuple(entries), truncated=truncated)

    async def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names, without following a last-component link."""
        location = self._locate(path)
        if not location.parts:
            return _info("", await self._stat_fields(path, "", ""))
        parent, name = _joined(location.parts[:-1]), location.parts[-1]
        return _info(_joined(location.parts), await self._stat_fields(path, parent, name))

    async def exists(self, path: str) -> bool:
        """True if ``path`` names an entry (a dangling link too); escapes still raise."""
        try:
            await self.stat(path)
        except FileNotFoundError:
            return False
        return True

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a link (not its target) or a directory (its tree with ``recursive``)."""
        location = self._locate(path, write=True)
        refuse_root(location, path, "removed")
        parent, name = _joined(location.parts[:-1]), location.parts[-1]
        await self._file_api(path, "remove", parent, name, "1" if recursive else "0")

    async def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination``, which must not exist (see the module on races)."""
        src, dst = self._locate(source, write=True), self._locate(destination, write=True)
        refuse_root(src, source, "renamed")
        refuse_root(dst, destination, "replaced")
        await self._file_api(
            source,
            "rename",
            _joined(src.parts[:-1]),
            src.parts[-1],
            _joined(dst.parts[:-1]),
            dst.parts[-1],
        )

    async def _replace_file(self, path: str, location: Location, temporary: str) -> None:
        """Rename the file ``temporary`` (a name beside ``location``'s target) over that target.

        One ``mv -f -T`` (a ``rename``) in the target's parent, entered as
        every operation enters it: the target is replaced at once, never
        followed if a link was planted there, never moved into if it became
        a directory. ``path`` is the caller's, for messages.
        """
        parent, name = _joined(location.parts[:-1]), location.parts[-1]
        await self._file_api(path, "replace", parent, temporary, name, root=location.anchor)

    async def _remove_file(self, path: str, location: Location, name: str) -> None:
        """Remove the entry ``name`` beside ``location``'s target (a failed write's temporary)."""
        parent = _joined(location.parts[:-1])
        await self._file_api(path, "remove", parent, name, "0", root=location.anchor)

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Create the directory ``path`` (``mkdir -p`` with ``parents``), never through a link."""
        location = self._locate(path, write=True)
        if not location.parts:
            if not parents:
                raise PathExists("the workspace root exists already")
            return
        parent, name = _joined(location.parts[:-1]), location.parts[-1]
        await self._file_api(path, "mkdir", parent, name, "1" if parents else "0")


def refuse_root(location: Location, path: str, what: str) -> None:
    """Refuse a remove or rename of (or onto) the workspace root: :class:`InvalidPathError`."""
    if not location.parts:
        raise InvalidPathError(
            f"path {path!r} names the workspace root, which cannot be {what}",
            hint="name an entry below the root; to empty the workspace, remove each entry",
        )


def _error(result: ExecResult, path: str, detail: str) -> Exception:
    """The error the script's exit code names (anything else: the sandbox failed)."""
    errors: dict[int, Exception] = {
        _MISSING: file_not_found(path),
        _LINK: PathEscapeError(
            f"path {path!r} goes through the symlink {detail!r}; "
            "symlinks in the workspace are never followed"
        ),
        _NOT_DIR: PermanentError(f"path {path!r}: component {detail!r} is not a directory"),
        _EXISTS: PathExists(f"the destination {detail!r} already exists"),
        _NOT_EMPTY: DirectoryNotEmpty(f"directory {path!r} is not empty; remove it recursively"),
        _FAILED: PermanentError(f"the file operation on {path!r} failed in the sandbox: {detail}"),
        _NO_ROOT: PermanentError(f"the sandbox's workspace root {detail!r} is missing"),
    }
    known = errors.get(result.exit_code)
    if known is not None:
        return known
    return ProviderUnavailable(
        f"the file API command failed in the sandbox (exit {result.exit_code}"
        f"{', timed out' if result.timed_out else ''}): {detail[:200]}"
    )
