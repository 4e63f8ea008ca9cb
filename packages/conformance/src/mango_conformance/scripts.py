"""The shell scripts the checks run inside sandboxes, and the helpers around them.

Every script needs only a POSIX ``sh`` and busybox-level tools (``cat``,
``printf``, ``sleep``, ``kill``, ``ln``, ``test``), because container
providers run the same suite in a busybox image. Scripts take their inputs as
positional parameters (``sh -c SCRIPT sh ARG...``), never by interpolation.
"""

from __future__ import annotations

import asyncio
import time

from mango.provider import Command, Sandbox

__all__ = [
    "CAT_ARG",
    "ENV_AND_CWD",
    "EXIT_WITH",
    "FLOOD",
    "FLOOD_CHUNK",
    "PATH_STATE",
    "PID_DETAIL",
    "PID_STATE",
    "POLL_INTERVAL",
    "PROCESS_TREE",
    "TOUCH",
    "describe_pid",
    "flood_expected",
    "sh_command",
    "wait_for_file",
    "wait_until_gone",
]

POLL_INTERVAL = 0.05
"""Seconds between two looks at a condition in a bounded poll loop."""

CAT_ARG = 'cat -- "$1"'
"""Print the file named by ``$1``."""

EXIT_WITH = 'printf %s "$1"; exit "$2"'
"""Print ``$1`` exactly, then exit with status ``$2``."""

TOUCH = 'printf %s "$2" > "$1"'
"""Write ``$2`` into the file ``$1`` (relative to the workspace)."""

ENV_AND_CWD = 'printf "%s|" "$MANGO_CONFORMANCE_PROBE"; cat probe.txt'
"""Print an environment variable, then a file of the current directory."""

PROCESS_TREE = (
    'sleep 300 & printf %s "$!" > "$1.child"; printf %s "$$" > "$1.leader"; : > "$1.ready"; wait'
)
"""A leader shell with one background child, both sleeping; writes their pids, then ``.ready``.

``$1`` is a file-name prefix. A provider that kills only the leader leaves
the child alive (and holding the output pipes).
"""

PID_STATE = (
    'pid=$(cat "$1") || { printf unreadable; exit 0; }; '
    'if kill -0 "$pid" 2>/dev/null; then '
    'if [ -r "/proc/$pid/stat" ] && read -r _ _ state _ < "/proc/$pid/stat" '
    '&& [ "$state" = Z ]; then printf gone; else printf alive; fi; '
    "else printf gone; fi"
)
"""Print ``alive`` if the pid stored in the file ``$1`` is a live process, ``gone`` if it is
not (or is a zombie), ``unreadable`` without the file.

The answer is on stdout, never in the exit status: a provider that reports exit
codes wrongly must fail the exit-code checks, not every check that looks at a
process. Zombies count as gone: a container whose init does not reap would keep them.
"""

PATH_STATE = 'if [ -e "$1" ]; then printf present; else printf absent; fi'
"""Print ``present`` or ``absent`` for the path ``$1`` (on stdout, for the reason above)."""

FLOOD_CHUNK = bytes((index * 131 + 7) % 251 for index in range(65521))
"""A binary block (an odd, prime length) that the flood script prints again and again."""

FLOOD = (
    "i=0; "
    'while [ "$i" -lt "$1" ]; do '
    "printf '%08d\\n' \"$i\"; cat flood.bin; "
    "printf '%08d\\n' \"$i\" >&2; cat flood.bin >&2; "
    "i=$((i + 1)); "
    "done"
)
"""Print ``$1`` numbered copies of ``flood.bin`` on stdout and on stderr."""


def flood_expected(blocks: int) -> bytes:
    """What :data:`FLOOD` prints on each stream for ``blocks`` copies."""
    return b"".join(f"{index:08d}\n".encode() + FLOOD_CHUNK for index in range(blocks))


def sh_command(
    shell: str, script: str, *args: str, stdin: bytes = b"", timeout: float | None = None
) -> Command:
    """``shell -c script sh args...`` as a :class:`Command`."""
    return Command(argv=(shell, "-c", script, "sh", *args), stdin=stdin, timeout=timeout)


async def wait_for_file(sandbox: Sandbox, path: str, bound: float) -> bool:
    """Poll until ``path`` exists in the workspace; False if ``bound`` seconds pass first."""
    deadline = time.monotonic() + bound
    while True:
        try:
            await sandbox.read_file(path)
        except FileNotFoundError:
            pass
        else:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_INTERVAL)


PID_DETAIL = (
    'pid=$(cat "$1") || exit 0; printf "pid %s" "$pid"; '
    '[ -r "/proc/$pid/status" ] || exit 0; '
    "while read -r key value; do case $key in "
    'Name:|State:|PPid:|SigPnd:|ShdPnd:|SigBlk:) printf \' %s %s\' "$key" "$value";; '
    'esac; done < "/proc/$pid/status"; '
    'wchan=$(cat "/proc/$pid/wchan" 2>/dev/null) && printf " wchan: %s" "$wchan"; '
    "printf ' cmdline:'; tr '\\000' ' ' < \"/proc/$pid/cmdline\" 2>/dev/null; exit 0"
)
"""Print what ``/proc`` says of the pid stored in ``$1`` (state, parent, pending and blocked
signals, wait channel, command line), for the message of a check whose process outlived its
bound: a process stuck in the kernel, a stopped one and a reused pid read differently."""


async def describe_pid(sandbox: Sandbox, shell: str, pid_file: str) -> str:
    """What :data:`PID_DETAIL` prints of the process in ``pid_file`` (never raises)."""
    try:
        result = await sandbox.exec(sh_command(shell, PID_DETAIL, pid_file))
    except Exception as exc:  # noqa: BLE001 - only a message is at stake
        return f"(no detail: {exc})"
    return result.stdout[:1000].decode("utf-8", "replace").strip() or "(no detail)"


async def wait_until_gone(sandbox: Sandbox, shell: str, pid_file: str, bound: float) -> bool:
    """Poll until the process whose pid is in ``pid_file`` is gone; False if it outlives ``bound``.

    Raises :class:`AssertionError` if the pid file cannot be read by the shell.
    """
    deadline = time.monotonic() + bound
    while True:
        result = await sandbox.exec(sh_command(shell, PID_STATE, pid_file))
        if result.stdout == b"gone":
            return True
        if result.stdout != b"alive":
            raise AssertionError(
                f"could not read the pid file {pid_file!r}: printed {result.stdout[:100]!r}, "
                f"stderr {result.stderr[:200]!r}"
            )
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_INTERVAL)
