"""The shell lines mango sends to the Daytona toolbox's ``/process/execute``.

The toolbox runs a request's ``command`` through a shell in newer daemons and
splits it on spaces (honouring quotes) and runs the first word *without* a
shell in older ones. Every line here is therefore ``/bin/sh -c '<script>'``:
one single-quoted script, which both daemons turn into the same argv. Values
are interpolated into the script only through :func:`~mango.provider.shell.quote`.

:func:`exec_line` wraps one command. The wrapper shell (``W``):

* writes its pid to ``$F.p`` (``F`` is a fresh path in the sandbox's
  ``${TMPDIR:-/tmp}/.mango-exec`` directory), so that :func:`kill_line` can
  end the command's process tree from a second request;
* enters the working directory below the root one component at a time,
  creating missing directories and refusing symlinks;
* runs the command (the kit's ``exec`` line, stdin ``/dev/null`` unless the
  plan feeds it) with stdout and stderr in two pipes, each read by a capper
  that keeps the first ``cap + 1`` bytes in a file and drains the rest to
  ``/dev/null`` (an empty file means the stream ended: no drain), so the
  command never blocks and the sandbox's disk holds at most ``cap + 1``
  bytes per stream, whatever the command prints;
* prints a framed result on its stdout: a marker line with the exit status,
  then each kept file in base64 (the toolbox returns output as a JSON string,
  which is not binary-safe), each section closed by the marker; then removes
  its files.

The extra byte kept past the cap tells the client that the stream was
truncated. The framing marker carries a random id, and the command's own
output never reaches the wrapper's stdout, so it cannot forge a result.
Requirements in the image: ``/bin/sh``, ``head``, ``cat``, ``base64``,
``mkdir``, ``rm`` (plus ``printf`` when stdin is inlined).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import attrs

from mango.provider import (
    Command,
    EntryKind,
    PathEscapeError,
    PermanentError,
    ProviderUnavailable,
)
from mango.provider.filesystem import NativeEntry
from mango.provider.shell import TREE_KILLER, plan_command, quote

__all__ = [
    "CONTROL_DIR",
    "SHELL",
    "ExecPlan",
    "WrapperResult",
    "classify_line",
    "exec_line",
    "kill_line",
    "parse_classification",
    "parse_result",
    "parse_stats",
    "replace_line",
    "stat_line",
    "unlink_line",
]

SHELL = "/bin/sh"
"""The POSIX shell every image must have; every line runs through it explicitly."""
CONTROL_DIR = "${TMPDIR:-/tmp}/.mango-exec"
"""Where the wrapper keeps its per-command files (expanded by the sandbox's shell)."""
STDIN_STAGING_DIR = "/tmp/.mango-stdin"  # noqa: S108 - inside the sandbox, not on the worker
"""Where large stdin is staged through the file API before the command runs."""
KILL_WAIT_STEPS = 30
"""How many 0.1 s steps the killer waits for a command's pid file to appear."""

_WRAPPER = r"""exec 2>/dev/null
F={F}; M={M}; L={L}
[ -d "${{F%/*}}" ] || mkdir -p "${{F%/*}}"
echo $$ > "$F.p"
if [ -L {R} ] || ! cd -P {R}; then printf '\n%s-error root\n' "$M"; rm -f "$F.p" "$F.k"; exit 0; fi
d={D}
if [ -n "$d" ]; then
    IFS=/; set -f
    for c in $d; do
        if [ -L "./$c" ]; then printf '\n%s-error symlink\n' "$M"; rm -f "$F.p" "$F.k"; exit 0; fi
        [ -e "./$c" ] || mkdir "./$c"
        if ! cd -P "./$c"; then printf '\n%s-error notdir\n' "$M"; rm -f "$F.p" "$F.k"; exit 0; fi
    done
    unset IFS; set +f
fi
unset OLDPWD
cap() {{ head -c "$L" > "$1"; [ -s "$1" ] && exec cat > /dev/null; }}
{{ {{ ( [ -e "$F.k" ] && exit 137; {LINE} ) < /dev/null; echo $? > "$F.x"; }} \
    2>&1 1>&3 3>&- | cap "$F.e"; }} 3>&1 | cap "$F.o"
ec=-1; [ -s "$F.x" ] && read -r ec < "$F.x"
printf '\n%s %s\n' "$M" "$ec"
[ -s "$F.o" ] && base64 "$F.o"
printf '\n%s\n' "$M"
[ -s "$F.e" ] && base64 "$F.e"
printf '\n%s\n' "$M"
rm -f "$F.o" "$F.e" "$F.x" "$F.p" "$F.k"
"""

_KILLER_PRELUDE = r""": > "$F.k" 2>/dev/null
i=0
while [ ! -s "$F.p" ] && [ "$i" -lt {STEPS} ]; do
    sleep 0.1 2>/dev/null || sleep 1; i=$((i + 1))
done
if [ ! -s "$F.p" ]; then rm -f "$F.k"; exit 0; fi
read -r pid < "$F.p" || exit 0
set -- "$pid" spare
"""

_CLASSIFY = r"""for p in "$@"; do
    if [ -L "$p" ]; then k=l; elif [ -d "$p" ]; then k=d; elif [ -f "$p" ]; then k=f
    elif [ -e "$p" ]; then k=o; else k=-; fi
    printf '%s' "$k"
done
"""
_STAT = r"""for p in "$@"; do
    if s=$(stat -c '%F|%s|%a|%Y' -- "$p" 2>/dev/null); then printf '%s\n' "$s"
    else printf -- '-\n'; fi
done
"""
_STAT_KINDS = {
    "regular file": EntryKind.REGULAR,
    "regular empty file": EntryKind.REGULAR,
    "directory": EntryKind.DIRECTORY,
    "symbolic link": EntryKind.SYMLINK,
}


@attrs.frozen
class ExecPlan:
    """One wrapped command: the line to send, its control file, and staged stdin if any."""

    line: str
    """The ``/bin/sh -c '<wrapper>'`` line for ``/process/execute``."""
    control: str
    """The command's control path ``F`` (unexpanded; the killer receives it)."""
    marker: str
    """The framing marker of this command's result."""
    stdin_path: str | None = None
    """Where stdin must be uploaded first (large stdin only)."""
    stdin_data: bytes = attrs.field(default=b"", repr=False)


def _sh(script: str, *args: str) -> str:
    """``/bin/sh -c '<script>' mango [args]``: one line both daemon kinds parse alike."""
    # An empty word would vanish in the old daemon's split; the callers pass none.
    return " ".join((SHELL, "-c", quote(script), "mango", *(quote(arg) for arg in args)))


def exec_line(command: Command, *, root: str, cap: int) -> ExecPlan:
    """The wrapped line for ``command`` in the workspace ``root`` with per-stream ``cap``."""
    token = secrets.token_hex(12)
    control = f"{CONTROL_DIR}/{token}"
    marker = f"mango-exec-{token}"
    plan = plan_command(
        command.argv, stdin=command.stdin, env=command.env, staging_dir=STDIN_STAGING_DIR
    )
    script = _WRAPPER.format(
        # The control path must stay unquoted where ${TMPDIR} has to expand.
        F=f'"{control}"',
        M=quote(marker),
        L=str(cap + 1),
        R=quote(root),
        D=quote(command.cwd),
        LINE=plan.line,
    )
    return ExecPlan(
        line=_sh(script),
        control=control,
        marker=marker,
        stdin_path=plan.stdin.path if plan.stdin.staged else None,
        stdin_data=plan.stdin.data,
    )


def kill_line(control: str) -> str:
    """The line that ends the process tree of the command whose control path is ``control``.

    It marks the command as killed (a command that has not started yet then
    never runs), waits briefly for its pid, and runs the kit's tree killer
    sparing the wrapper, which then reports what the command printed.
    """
    script = f'F="{control}"\n' + _KILLER_PRELUDE.format(STEPS=KILL_WAIT_STEPS) + TREE_KILLER
    return _sh(script)


def classify_line(paths: Sequence[str]) -> str:
    """The line that prints one kind letter per path, never following a symlink.

    ``l`` symlink, ``d`` directory, ``f`` regular file, ``o`` other, ``-`` missing.
    """
    return _sh(_CLASSIFY, *paths)


def stat_line(paths: Sequence[str]) -> str:
    """The line that prints each path's ``lstat`` (``stat -c`` without ``-L``), one per line.

    ``<kind>|<size>|<octal permissions>|<mtime seconds>``, or ``-`` for a missing path.
    """
    return _sh(_STAT, *paths)


def unlink_line(path: str) -> str:
    """The line that removes the link ``path`` itself (``rm -f``: never its target)."""
    return _sh('rm -f -- "$1"', path)


def replace_line(source: str, destination: str) -> str:
    """The line that renames the file ``source`` over ``destination`` in one ``rename``.

    ``-T``: a destination that became a directory is never moved into; a
    link there is replaced itself, never followed.
    """
    return _sh('mv -f -T -- "$1" "$2"', source, destination)


def parse_stats(output: str, paths: Sequence[str]) -> list[NativeEntry | None]:
    """The entries a :func:`stat_line` printed, in the order of ``paths``."""
    lines = output.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(paths):
        raise ProviderUnavailable(f"the toolbox answered a stat with {output[:80]!r}")
    entries: list[NativeEntry | None] = []
    for path, line in zip(paths, lines, strict=True):
        if line == "-":
            entries.append(None)
            continue
        kind, _, rest = line.partition("|")
        size, mode, mtime = [*rest.split("|"), "", "", ""][:3]
        if not size.isdigit() or not mtime.isdigit() or (mode and mode.strip("01234567")):
            raise ProviderUnavailable(f"the toolbox answered a stat with {line[:80]!r}")
        link = _STAT_KINDS.get(kind) is EntryKind.SYMLINK
        entries.append(
            NativeEntry(
                path=path,
                kind=_STAT_KINDS.get(kind, EntryKind.OTHER),
                size=int(size),
                mode=int(mode, 8) if mode and not link else None,
                mtime=datetime.fromtimestamp(int(mtime), UTC),
            )
        )
    return entries


def parse_classification(output: str, count: int) -> str:
    """The kind letters of a classification's output; raises if they do not add up."""
    letters = output.strip()
    if len(letters) != count or letters.strip("ldfo-"):
        raise ProviderUnavailable(
            f"the toolbox answered a path classification with {output[:80]!r}"
        )
    return letters


@attrs.frozen
class WrapperResult:
    """What the wrapper reported: the exit status and the kept bytes of each stream."""

    exit_code: int
    stdout: bytes
    stderr: bytes


_ERRORS = {
    "root": "the workspace root is missing or was replaced by a symlink",
    "symlink": "the working directory goes through a symlink",
    "notdir": "a component of the working directory is not a directory",
}


def _decode(section: str) -> bytes:
    try:
        return base64.b64decode("".join(section.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProviderUnavailable("the toolbox returned a damaged command result") from exc


def parse_result(output: str, marker: str) -> WrapperResult:
    """Parse the wrapper's framed result out of the toolbox's ``result`` text.

    Raises :class:`~mango.provider.PathEscapeError` or :class:`PermanentError`
    for a working directory the wrapper refused, and
    :class:`ProviderUnavailable` if the frame is missing (the wrapper did not
    run to its end: the daemon killed it, or the sandbox stopped).
    """
    # str.find, not a pattern built around the marker: that one is new for every command,
    # so re's cache never held it and each result compiled two regular expressions.
    error = _field(output, f"\n{marker}-error ", _REASON)
    if error is not None:
        reason = error[0]
        message = _ERRORS.get(reason, f"the command could not start ({reason})")
        if reason == "symlink":
            raise PathEscapeError(message)
        raise PermanentError(message)
    head = _field(output, f"\n{marker} ", _STATUS)
    if head is None:
        raise ProviderUnavailable("the toolbox returned no result for the command")
    sections = output[head[1] :].split(f"\n{marker}\n")
    if len(sections) < 3:
        raise ProviderUnavailable("the toolbox returned a truncated command result")
    return WrapperResult(int(head[0]), _decode(sections[0]), _decode(sections[1]))


_REASON = re.compile(r"\w+")
_STATUS = re.compile(r"-?\d+")


def _field(output: str, prefix: str, shape: re.Pattern[str]) -> tuple[str, int] | None:
    """The first ``prefix<field>\\n`` line of ``output`` whose field is all ``shape``: the field
    and where the text after its line starts; None if there is none."""
    start = output.find(prefix)
    while start >= 0:
        begin = start + len(prefix)
        end = output.find("\n", begin)
        if end < 0:
            return None
        if shape.fullmatch(output, begin, end):
            return output[begin:end], end + 1
        start = output.find(prefix, start + 1)
    return None
