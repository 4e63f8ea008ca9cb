"""The remote command-line rule: one argv vector as one POSIX shell line.

Remote sandbox APIs run a *string* through a shell, while mango commands are
argv vectors. Every remote adapter turns a command into a line by the same
rule, so quoting is proven once (reference: remote-protocols.md §1.4):

* each argv element is single-quoted (``'`` becomes ``'"'"'``, the empty
  string ``''``), joined by spaces and prefixed by ``exec``;
* the program is looked up first, as the local provider's ``execvp`` and
  Docker's wrapper look it up: one that cannot be run is reported the same
  way on every provider (``mango: NAME: command not found`` and 127,
  ``mango: PATH: No such file or directory`` and 127, ``mango: PATH:
  Permission denied`` and 126), never with the shell's own words (``exec:
  NAME: not found``) or ``setsid``'s (``failed to execute NAME``);
* the working directory is entered first: ``cd '<dir>' &&``;
* the extra environment is exported before the program runs:
  ``export NAME='value' ... &&`` (names validated as POSIX names);
* with ``new_session=True`` the program runs as the leader of a new session
  and process group (``setsid``, when the sandbox has it; the shell that
  runs the line must not itself lead a process group, which holds for a
  vendor's process API): one ``kill -KILL -- -<pid>`` then ends the whole
  tree, which a vendor API that signals only its pid cannot do
  (:func:`kill_tree_line`);
* stdin is carried by a :class:`StdinPlan`:

  - none: the line as is (the provider gives the process an empty stdin);
  - ``inline``: ``printf %s '<base64>' | base64 -d | exec ...`` inside the
    line, used while the whole line stays under :data:`MAX_INLINE_LINE_BYTES`
    (``printf`` is a shell builtin, so only the line itself meets the kernel's
    argument limit and chunking the ``printf`` would gain nothing);
  - ``staged``: larger stdin cannot travel in the line, because the line is
    one argument of ``sh -c`` and Linux refuses any single argument over
    ``MAX_ARG_STRLEN`` (128 KiB). The adapter first writes
    :attr:`StdinPlan.data` to :attr:`StdinPlan.path` through the provider's
    file API (an adapter-owned directory), then runs the line, which opens
    the file as stdin, unlinks it, and ``exec``s the program:
    ``{ rm -f -- '<path>'; cd ... && exec ...; } < '<path>'``. The file is gone before
    the program starts, so a killed command leaves nothing behind; if the
    exec call fails before the shell ran, the adapter removes the path itself
    (not-found is fine).

The tree killer (:data:`TREE_KILLER`) is the other half of the rule: a
command that must be stopped (timeout, cancellation) is ended by a second
call that runs ``sh -c TREE_KILLER mango-kill PID [spare]`` in the sandbox.

Example::

    plan = plan_command(command, root="/workspace", staging_dir="/var/lib/mango/stdin")
    if plan.stdin.staged:
        await files.upload(plan.stdin.path, plan.stdin.data)
    await vendor.run(["/bin/sh", "-c", plan.line])
"""

from __future__ import annotations

import base64
import posixpath
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence

import attrs

from mango.domain.errors import InvalidInput

__all__ = [
    "MAX_INLINE_LINE_BYTES",
    "TREE_KILLER",
    "CommandPlan",
    "StdinPlan",
    "command_line",
    "kill_tree_line",
    "plan_command",
    "quote",
]

MAX_INLINE_LINE_BYTES = 96 * 1024
"""Largest line (UTF-8 bytes) that carries stdin inline.

Below Linux's ``MAX_ARG_STRLEN`` of 128 KiB per argument, with room for a
vendor's own wrapping (``bash -l -c``, ``su``, ...).
"""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def quote(arg: str) -> str:
    """Single-quote ``arg`` for a POSIX shell: ``'`` becomes ``'"'"'``; empty gives ``''``."""
    if not isinstance(arg, str):
        raise InvalidInput(f"shell words must be strings, got {type(arg).__name__}")
    if "\x00" in arg:
        raise InvalidInput("shell words may not contain NUL bytes")
    return "'" + arg.replace("'", "'\"'\"'") + "'"


# ``command -v`` is a builtin: probing costs no fork. Without setsid the program
# still runs (leader-only kills); ``$mango_setsid`` is unquoted on purpose, so an
# empty value vanishes.
_SETSID_PROBE = "{ command -v setsid >/dev/null 2>&1 && mango_setsid=setsid || mango_setsid=; }; "


# The program lookup of execvp (and of Docker's wrapper), in POSIX sh builtins only:
# a name with a slash must exist and be an executable file, a bare name must be an
# executable file in a directory of $PATH (an empty entry is the working directory).
_PROGRAM_CHECK = (
    "mango_p={program}; case $mango_p in "
    '*/*) if [ ! -e "$mango_p" ]; then '
    "printf 'mango: %s: No such file or directory\\n' \"$mango_p\" >&2; exit 127; fi; "
    'if [ -d "$mango_p" ] || [ ! -x "$mango_p" ]; then '
    "printf 'mango: %s: Permission denied\\n' \"$mango_p\" >&2; exit 126; fi;; "
    "*) mango_f=; mango_i=$IFS; IFS=:; set -f; "
    "for mango_d in $PATH; do "
    'if [ -f "${{mango_d:-.}}/$mango_p" ] && [ -x "${{mango_d:-.}}/$mango_p" ]; then '
    "mango_f=1; break; fi; done; "
    "IFS=$mango_i; set +f; "
    'if [ -z "$mango_f" ]; then '
    "printf 'mango: %s: command not found\\n' \"$mango_p\" >&2; exit 127; fi;; "
    "esac; unset mango_p mango_f mango_i mango_d; "
)


def _exec_words(argv: Sequence[str], *, new_session: bool = False) -> str:
    if isinstance(argv, str | bytes) or not argv:
        raise InvalidInput("argv must be a non-empty sequence of strings")
    if not argv[0]:
        raise InvalidInput("argv[0] (the program) is empty")
    launcher = "$mango_setsid " if new_session else ""
    check = _PROGRAM_CHECK.format(program=quote(argv[0]))
    # Braces: the words may follow a pipe (inline stdin), where they run in a subshell.
    return "{ " + check + "exec " + launcher + " ".join(quote(arg) for arg in argv) + "; }"


def kill_tree_line(pid: int) -> str:
    """The line that kills the process group led by ``pid``, then ``pid`` itself.

    For commands started with ``new_session=True``; harmless if the group or the
    process is already gone (exit status 0 either way).
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise InvalidInput(f"refusing to kill process {pid!r}")
    # No "--": dash's kill builtin takes "-<pid>" after a signal but refuses "--".
    return f"kill -KILL -{pid} 2>/dev/null; kill -KILL {pid} 2>/dev/null; exit 0"


def _env_items(env: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
    if env is None:
        return []
    items = list(env.items() if isinstance(env, Mapping) else env)
    for name, _value in items:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise InvalidInput(f"environment variable name {name!r} is not valid")
    return items


def _prefix(
    *, root: str | None, cwd: str, env: Mapping[str, str] | Iterable[tuple[str, str]] | None
) -> str:
    parts: list[str] = []
    if root is not None or cwd:
        if cwd and posixpath.isabs(cwd):
            raise InvalidInput(f"cwd {cwd!r} must be relative to the sandbox root")
        directory = posixpath.join(root or ".", cwd) if cwd else (root or ".")
        parts.append(f"cd {quote(directory)}")
    items = _env_items(env)
    if items:
        parts.append("export " + " ".join(f"{name}={quote(value)}" for name, value in items))
    return "".join(f"{part} && " for part in parts)


def command_line(
    argv: Sequence[str],
    *,
    root: str | None = None,
    cwd: str = "",
    env: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    new_session: bool = False,
) -> str:
    """The line that runs ``argv`` with no stdin: ``[cd ... && ][export ... && ]exec 'a' 'b'``.

    ``root`` is the sandbox root on the remote side; ``cwd`` is relative to it
    (mango's :attr:`Command.cwd`). With neither, no ``cd`` is emitted.
    ``new_session`` runs the program in a new session (see the module docstring).
    """
    head = _SETSID_PROBE if new_session else ""
    return head + _prefix(root=root, cwd=cwd, env=env) + _exec_words(argv, new_session=new_session)


@attrs.frozen
class StdinPlan:
    """How stdin reaches the remote process: nothing, inline in the line, or a staged file.

    When :attr:`staged`, the adapter writes :attr:`data` to :attr:`path`
    (through the provider's file API) before it runs the line.
    """

    kind: str
    """``"none"``, ``"inline"`` or ``"staged"``."""
    path: str | None = None
    """The staging file (``staged`` only); the line removes it."""
    data: bytes = attrs.field(default=b"", repr=lambda data: f"<{len(data)} bytes>")
    """The bytes to stage (``staged`` only; empty otherwise)."""

    @property
    def staged(self) -> bool:
        """Whether the adapter must write :attr:`data` to :attr:`path` first."""
        return self.kind == "staged"


@attrs.frozen
class CommandPlan:
    """One command ready for a remote shell: the line and how its stdin travels."""

    line: str
    """The POSIX shell line; run it with ``sh -c`` (or the vendor's shell API)."""
    stdin: StdinPlan


def plan_command(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    root: str | None = None,
    cwd: str = "",
    env: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    staging_dir: str,
    max_inline_line_bytes: int = MAX_INLINE_LINE_BYTES,
    new_session: bool = False,
) -> CommandPlan:
    """Plan ``argv`` with ``stdin``, ``env`` and ``cwd`` for a remote shell.

    Empty stdin adds nothing. Stdin whose inline form keeps the line within
    ``max_inline_line_bytes`` is inlined as base64; larger stdin is staged
    at a fresh random path under ``staging_dir`` (an adapter-owned absolute
    directory that exists in the sandbox). Raises :class:`InvalidInput` if
    the line without stdin is already too long for one shell argument.
    ``new_session`` runs the program in a new session (see the module docstring).
    """
    if not isinstance(stdin, bytes | bytearray | memoryview):
        raise InvalidInput(f"stdin must be bytes, got {type(stdin).__name__}")
    data = bytes(stdin)
    prefix = (_SETSID_PROBE if new_session else "") + _prefix(root=root, cwd=cwd, env=env)
    words = _exec_words(argv, new_session=new_session)
    plain = prefix + words
    if len(plain.encode()) > max_inline_line_bytes:
        raise InvalidInput(
            f"the command line is {len(plain.encode())} bytes; a remote shell takes at most "
            f"{max_inline_line_bytes}"
        )
    if not data:
        return CommandPlan(plain, StdinPlan("none"))
    encoded = base64.b64encode(data).decode("ascii")
    inline = f"{prefix}printf %s '{encoded}' | base64 -d | {words}"
    if len(inline.encode()) <= max_inline_line_bytes:
        return CommandPlan(inline, StdinPlan("inline"))
    if not posixpath.isabs(staging_dir):
        raise InvalidInput(f"staging_dir {staging_dir!r} must be an absolute path")
    path = posixpath.join(staging_dir, f"stdin-{secrets.token_hex(12)}")
    # The file is unlinked first thing, so neither a failing cd nor a killed
    # program leaves it behind.
    staged = f"{{ rm -f -- {quote(path)}; {prefix}{words}; }} < {quote(path)}"
    return CommandPlan(staged, StdinPlan("staged", path=path, data=data))


TREE_KILLER = r"""r=$1; spare=$2
case $r in ''|*[!0-9]*) exit 2;; esac
[ "$r" -gt 1 ] || exit 2
kill -STOP "$r" 2>/dev/null
frozen=" $r "
more=1
while [ -n "$more" ]; do
    more=
    for f in /proc/[0-9]*/stat; do
        p=${f#/proc/}; p=${p%/stat}
        case $frozen in *" $p "*) continue;; esac
        [ "$p" = "$$" ] && continue
        IFS= read -r s < "$f" 2>/dev/null || continue
        s=${s##*) }; s=${s#* }
        pp=${s%% *}; s=${s#* }
        pg=${s%% *}; s=${s#* }
        sid=${s%% *}
        case $frozen in *" $pp "*) pp=in;; esac
        if [ "$pg" = "$r" ] || [ "$sid" = "$r" ] || [ "$pp" = in ]; then
            kill -STOP "$p" 2>/dev/null
            frozen="$frozen$p "
            more=1
        fi
    done
done
if [ "$spare" = spare ]; then
    for p in $frozen; do [ "$p" = "$r" ] || kill -KILL "$p" 2>/dev/null; done
    kill -CONT "$r" 2>/dev/null
else
    kill -KILL -- "-$r" 2>/dev/null
    for p in $frozen; do kill -KILL "$p" 2>/dev/null; done
fi
exit 0
"""
"""``sh -c TREE_KILLER mango-kill PID [spare]``: end the process tree rooted at ``PID``.

POSIX ``sh`` builtins and ``/proc`` only (busybox, dash, bash). It freezes
(``SIGSTOP``) the root, then repeatedly scans ``/proc`` and freezes every
process whose process group or session is the root's pid or whose parent is
already frozen, until a scan finds nothing new; frozen processes cannot fork
or be re-parented away while the tree is collected. Then it sends
``SIGKILL`` to the group and every frozen process. With ``spare`` the root
itself survives: every descendant is killed and the root continued
(``SIGCONT``), so a wrapper shell can report what its command printed. A
descendant that called ``setsid`` *and* whose parent exited before the kill
has left the tree and is not found (the limit of any process-group kill).
"""
