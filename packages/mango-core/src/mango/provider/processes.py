"""Background processes on a remote sandbox: a small supervisor in the sandbox's own shell.

A vendor's process API starts a command and, at best, streams its output
while someone listens (E2B's envd does not replay past output on
``Connect``). The capability ``background-processes`` promises more: a
fresh provider instance in another worker lists a process, reads its log
from any byte offset and learns how it ended. Those facts must outlive every
client, so they are kept in the sandbox, in a provider-owned directory per
process (:data:`PROCESS_DIR` ``/<id>/``):

========== ==================================================================
``meta``   one JSON line written before the start: ``argv``, ``started_at``
``pid``    the supervisor's pid (it leads the process group of the tree)
``log.N``  stdout and stderr in the order written, in segments from offset N
``exit``   the exit status, written by the supervisor when the command ends
``killed`` written before a kill (by :meth:`kill` or the timeout watchdog)
========== ==================================================================

The supervisor (:func:`supervisor_line`) becomes the leader of a new session
and process group (``setsid`` in place: a vendor's process API does not
start its command as a group leader), sends its output to ``log``, runs the
command in a subshell, and writes ``exit``. One ``kill -KILL -<pid>`` ends
the supervisor and the whole tree (no ``exit`` then: ``killed`` says why).
A vendor that kills its sandbox's processes on destroy kills the group with
them (the VM or container goes).

A process whose ``exit`` is missing and whom the vendor no longer lists
ended without a word (its sandbox restarted, the supervisor was killed
behind mango's back): nothing will record its end, and it is reported
:attr:`~mango.domain.sandbox_ports.ProcessState.KILLED` with no exit code,
as the local and Docker providers report a lost supervisor.
The shell reports a command killed by signal N as ``128 + N``; the table
reports it as ``-N`` (a command that itself exits with 129 to 192 is read
the same way: a shell cannot tell them apart).

The log is segments ``log.<offset>`` (:func:`segment_writer`), each named
by the offset of its first byte: past the cap (``MANGO_MAX_PROCESS_LOG_BYTES``'s
default, 16 MiB) the oldest go, offsets keep counting from the process's first
byte, and a read (:func:`log_line`, at most ``max_bytes``) reports the bytes
dropped before it. A vendor that keeps the output itself (execd) is read
there instead (``log=False``).
"""

from __future__ import annotations

import json
import posixpath
import re
import secrets
import time
from datetime import UTC, datetime

import attrs

from mango.domain.errors import InvalidInput, ProcessNotFound
from mango.domain.limits import DEFAULT_MAX_PROCESS_LOG_BYTES
from mango.domain.sandbox_ports import ProcessInfo, ProcessOutput, ProcessState
from mango.domain.values import Command
from mango.provider.shell import command_line, quote

__all__ = [
    "PROCESS_DIR",
    "ProcessRecord",
    "check_process_id",
    "check_window",
    "launch_line",
    "listing_line",
    "log_line",
    "meta_json",
    "new_process_id",
    "output_slice",
    "parse_listing",
    "parse_log_answer",
    "process_directory",
    "segment_writer",
    "stdin_line",
    "supervisor_line",
    "wait_line",
]

PROCESS_DIR = "/var/lib/mango/processes"
"""The provider-owned directory in the sandbox that holds one directory per process."""

# kill -0, except that a zombie (an orphan whose reaper does not reap) has ended all the same.
_ALIVE = (
    'mango_alive() { kill -0 "$1" 2>/dev/null || return 1; '
    's=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; '
    "case ${s##*) } in Z*) return 1;; esac; return 0; }; "
)
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}\Z")
_SIGNALS = range(129, 129 + 64)


def new_process_id() -> str:
    """A fresh id: sortable by start (milliseconds, hex) and unguessable (random tail)."""
    return f"p{int(time.time() * 1000):012x}-{secrets.token_hex(6)}"


def check_process_id(process_id: str) -> str:
    """``process_id`` if it could name a process; else :class:`ProcessNotFound`.

    An id becomes a path component and a shell word: anything but lowercase
    letters, digits and dashes names no process, by construction.
    """
    if not isinstance(process_id, str) or not _ID.match(process_id):
        raise ProcessNotFound(str(process_id))
    return process_id


def check_window(since: int, max_bytes: int | None, default: int) -> int:
    """Validate a log read's ``since``/``max_bytes``; return the byte limit to use."""
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise InvalidInput(f"since must be a byte offset of 0 or more, got {since!r}")
    if max_bytes is None:
        return default
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidInput(f"max_bytes must be 1 or more, got {max_bytes!r}")
    return max_bytes


def process_directory(process_id: str, root: str = PROCESS_DIR) -> str:
    """The directory of the process ``process_id`` under ``root``."""
    return posixpath.join(root, check_process_id(process_id))


def meta_json(command: Command, started_at: datetime) -> bytes:
    """The ``meta`` file of a process: one JSON line (no newline inside)."""
    meta = {"argv": list(command.argv), "started_at": started_at.astimezone(UTC).isoformat()}
    return json.dumps(meta, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def supervisor_line(
    command: Command,
    *,
    root: str,
    directory: str,
    stdin_fifo: bool = False,
    detach: bool = False,
    new_session: bool = True,
    log: bool = True,
    cap: int = DEFAULT_MAX_PROCESS_LOG_BYTES,
) -> str:
    """The line (for ``sh -c`` or ``bash -c``) that supervises ``command`` (module docstring).

    ``root`` is the sandbox's workspace root (``command.cwd`` is below it);
    ``directory`` the process's own directory, whose ``meta`` exists already.
    ``command.timeout`` arms a watchdog in the same group that writes
    ``killed`` and kills the group. Stdin stays the vendor's pipe (so that
    ``send_stdin`` reaches the command); ``command.stdin`` is sent through it.

    ``stdin_fifo`` (for a vendor without a stdin API): stdin is the FIFO
    ``stdin`` in the directory, opened for reading *and* writing so that the
    command never reads end-of-file and a writer never blocks on its open
    (:func:`stdin_line`). ``detach``: the line does not ``exec`` the
    supervisor but runs it as a child (a vendor's session shell must live on
    to report the exit). ``new_session=False`` for a vendor that starts its
    command as a process-group leader already (execd): the supervisor is
    that leader, no ``setsid`` (which would fork). ``log=False`` leaves the
    output on the vendor's own log (execd keeps one, read by byte offset).
    ``cap`` bounds the log kept (:func:`segment_writer`).
    """
    user = command_line(command.argv, root=root, cwd=command.cwd, env=command.env)
    fifo = 'rm -f "$D/stdin"; mkfifo "$D/stdin" && exec 0<>"$D/stdin"; ' if stdin_fifo else ""
    redirect = "exec >/dev/null 2>&1; " if log else ""
    watchdog = ""
    if command.timeout is not None:
        seconds = max(command.timeout, 0.001)
        watchdog = (
            f"( exec </dev/null >/dev/null 2>&1; sleep {seconds:.3f}; "
            ': > "$D/killed"; kill -KILL -$$ ) & mango_w=$!; '
        )
    body = (
        f"D={quote(directory)}; "
        f"{redirect}"
        f"{fifo}"
        'echo $$ >"$D/pid"; '
        "mango_w=; "
        f"{watchdog}"
        f"{segment_writer(cap) if log else ''}"
        + (
            f'{{ ( {user} ); echo $? >"$D/rc"; }} 2>&1 | mango_seg; mango_c=$(cat "$D/rc"); '
            if log
            else f"( {user} ); mango_c=$?; "
        )
        + ""
        '[ -n "$mango_w" ] && kill -KILL "$mango_w" 2>/dev/null; '
        'printf %s "$mango_c" >"$D/exit.tmp" && mv -f "$D/exit.tmp" "$D/exit"'
    )
    # setsid in place where the vendor's shell is no group leader (else setsid forks):
    # either way the supervisor leads the tree.
    run = "" if detach else "exec "
    if not new_session:
        return f"{run}/bin/sh -c {quote(body)}"
    return (
        "if command -v setsid >/dev/null 2>&1; then "
        f"{run}setsid /bin/sh -c {quote(body)}; else {run}/bin/sh -c {quote(body)}; fi"
    )


def stdin_line(directory: str) -> str:
    """The line that copies its own stdin into the process's FIFO (``stdin_fifo``).

    Opened read-write, so the open never blocks, even if the supervisor is
    gone (the caller checks that the process runs first).
    """
    return f"exec 4<>{quote(directory + '/stdin')} && cat >&4"


def segment_writer(cap: int) -> str:
    """The shell function ``mango_seg``: stdin into ``$D/log.<offset>`` segments, capped.

    Each segment is named by the log offset of its first byte; a segment is
    closed at an eighth of ``cap`` and the oldest closed ones are removed
    while the closed ones hold more than seven eighths, so the log keeps
    about ``cap`` bytes, the oldest dropped first (an offset keeps its
    meaning: it counts from the process's first byte). One ``dd`` read per
    round (``count=1``: a partial read is passed on at once, nothing waits
    for a full block); a read that adds nothing is the end of the output.
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 8:
        raise InvalidInput(f"the process log cap must be 8 bytes or more, got {cap!r}")
    segment = cap // 8
    block = min(65536, segment)
    return (
        "mango_seg() { "
        's=0; f=0; k=0; : >"$D/log.0"; '
        "while :; do "
        'b=$(($(wc -c <"$D/log.$s"))); '
        f'dd bs={block} count=1 2>/dev/null >>"$D/log.$s"; '
        'a=$(($(wc -c <"$D/log.$s"))); '
        '[ "$a" -eq "$b" ] && break; '
        f'if [ "$a" -ge {segment} ]; then s=$((s + a)); : >"$D/log.$s"; k="$k $s"; '
        f"while [ $((s - f)) -gt {cap - segment} ]; do "
        'rm -f "$D/log.$f"; k=${k#* }; f=${k%% *}; done; fi; '
        "done; }; "
    )


def log_line(directory: str, since: int, max_bytes: int) -> str:
    """The line that prints ``first size``, a newline, then at most ``max_bytes`` from ``since``.

    ``first`` is the offset of the first byte still kept (the bytes dropped
    so far), ``size`` the log's end; the data starts at ``since`` or, if that
    was dropped, at ``first`` (:func:`parse_log_answer`). A segment removed
    while it is read ends the data early: the reader asks again from there.
    """
    d = quote(directory)
    return (
        f"cd {d} 2>/dev/null || {{ echo '0 0'; exit 0; }}; "
        'st=$(for n in log.*; do [ -f "$n" ] && echo "${n#log.}"; done | sort -n); '
        'first=; last=; for x in $st; do [ -z "$first" ] && first=$x; last=$x; done; '
        "[ -n \"$last\" ] || { echo '0 0'; exit 0; }; "
        'size=$((last + $(wc -c <"log.$last"))); '
        f"from={since}; [ $from -lt $first ] && from=$first; "
        'printf \'%s %s\\n\' "$first" "$size"; '
        f"left={max_bytes}; "
        "for x in $st; do "
        '[ -f "log.$x" ] || break; '
        'e=$((x + $(wc -c <"log.$x"))); '
        "[ $e -le $from ] && continue; [ $left -le 0 ] && break; "
        "k=$((from - x)); n=$((e - from)); [ $n -gt $left ] && n=$left; "
        'tail -c +$((k + 1)) "log.$x" | head -c $n; '
        "left=$((left - n)); from=$e; "
        "done; exit 0"
    )


def parse_log_answer(answer: bytes, since: int) -> tuple[bytes, int, int, int]:
    """``(data, offset, size, dropped)`` from what :func:`log_line` printed."""
    head, _, data = answer.partition(b"\n")
    fields = head.split()
    first, size = (int(fields[0]), int(fields[1])) if len(fields) == 2 else (0, 0)
    return data, max(since, first), size, first


def wait_line(directory: str, seconds: float) -> str:
    """The line that returns once ``exit`` or ``killed`` exists, the pid is gone, or ``seconds``."""
    d = quote(directory)
    rounds = max(1, int(seconds / 0.1))
    return (
        f'{_ALIVE}d={d}; p=$(cat "$d/pid" 2>/dev/null); i=0; '
        f'while [ $i -lt {rounds} ] && [ ! -e "$d/exit" ] && [ ! -e "$d/killed" ] && '
        '{ [ -z "$p" ] || mango_alive "$p"; }; do sleep 0.1; i=$((i+1)); done; exit 0'
    )


def launch_line(
    command: Command,
    started_at: datetime,
    *,
    root: str,
    directory: str,
    detach: bool = True,
    new_session: bool = True,
    log: bool = True,
    cap: int = DEFAULT_MAX_PROCESS_LOG_BYTES,
) -> str:
    """The whole start for a vendor that runs one shell line detached: the directory, ``meta``,
    then the supervisor with a stdin FIFO (the flags as for :func:`supervisor_line`)."""
    meta = quote(meta_json(command, started_at).decode().rstrip("\n"))
    target = quote(directory + "/meta")
    supervisor = supervisor_line(
        command,
        root=root,
        directory=directory,
        stdin_fifo=True,
        detach=detach,
        new_session=new_session,
        log=log,
        cap=cap,
    )
    return f"mkdir -p {quote(directory)} && printf '%s\\n' {meta} > {target} && {supervisor}"


def listing_line(root: str = PROCESS_DIR, process_id: str | None = None) -> str:
    """The line that prints one record per process (or only ``process_id``'s), for
    :func:`parse_listing`: ``id TAB pid TAB exit TAB killed TAB alive TAB vendor TAB meta``
    (``vendor``: the vendor's own id of the command, where the provider keeps one).

    ``alive`` is ``kill -0`` of the supervisor's pid (1: it still runs), a zombie
    (``/proc/<pid>/stat`` state ``Z``) counting as ended.
    """
    pattern = quote(check_process_id(process_id)) if process_id is not None else "*"
    return (
        f"{_ALIVE}cd {quote(root)} 2>/dev/null || exit 0; "
        f"for d in {pattern}; do "
        '[ -f "$d/meta" ] || continue; '
        'p=$(cat "$d/pid" 2>/dev/null); x=$(cat "$d/exit" 2>/dev/null); '
        'k=0; [ -e "$d/killed" ] && k=1; '
        'a=0; [ -n "$p" ] && mango_alive "$p" && a=1; '
        'v=$(cat "$d/vendor" 2>/dev/null); '
        'printf \'%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t\' "$d" "${p:--}" "${x:--}" "$k" "$a" "${v:--}"; '
        'head -n 1 "$d/meta"; '
        "done"
    )


@attrs.frozen
class ProcessRecord:
    """What the sandbox's files say about one process."""

    id: str
    argv: tuple[str, ...]
    started_at: datetime | None
    pid: int | None
    exit: int | None
    killed: bool
    alive: bool = False
    """The supervisor's pid answered ``kill -0`` when the listing ran."""
    vendor: str | None = None
    """The vendor's id of the command that runs the supervisor (execd's), if kept."""

    @property
    def ended(self) -> bool:
        """The files alone say it ended (its ``exit`` or ``killed`` is written)."""
        return self.exit is not None or self.killed

    def info(self, *, running: bool) -> ProcessInfo:
        """Its :class:`ProcessInfo`, given whether the vendor still runs it.

        An ``exit`` file wins (the command ended by itself, even if a kill came
        late); ``killed`` without one is a kill; neither, and not running, is
        a supervisor lost with its sandbox's restart: killed, no exit code.
        """
        if self.exit is not None:
            code = -(self.exit - 128) if self.exit in _SIGNALS else self.exit
            state = ProcessState.EXITED
        elif self.killed:
            code, state = -9, ProcessState.KILLED
        elif running:
            code, state = None, ProcessState.RUNNING
        else:
            code, state = None, ProcessState.KILLED
        return ProcessInfo(
            id=self.id,
            argv=self.argv,
            state=state,
            pid=self.pid,
            exit_code=code,
            started_at=self.started_at,
        )


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def parse_listing(text: str) -> list[ProcessRecord]:
    """The records :func:`listing_line` printed, oldest first (malformed lines skipped)."""
    records: list[ProcessRecord] = []
    for line in text.splitlines():
        parts = line.split("\t", 6)
        if len(parts) != 7 or not _ID.match(parts[0]):
            continue
        try:
            meta = json.loads(parts[6])
            argv = tuple(str(arg) for arg in meta["argv"])
            started = datetime.fromisoformat(str(meta["started_at"]))
        except (ValueError, KeyError, TypeError):
            continue
        records.append(
            ProcessRecord(
                id=parts[0],
                argv=argv,
                started_at=started if started.tzinfo is not None else None,
                pid=_int(parts[1]),
                exit=_int(parts[2]),
                killed=parts[3] == "1",
                alive=parts[4] == "1",
                vendor=None if parts[5] == "-" else parts[5],
            )
        )
    epoch = datetime.min.replace(tzinfo=UTC)
    records.sort(key=lambda record: (record.started_at or epoch, record.id))
    return records


def output_slice(
    data: bytes, *, since: int, size: int, ended: bool, dropped: int = 0
) -> ProcessOutput:
    """A :class:`ProcessOutput` for ``data`` read at ``since`` from a log of ``size`` bytes.

    ``ended`` must have been learnt *before* the read: only then is ``size``
    the final length of the log. ``dropped``: the bytes discarded so far; a
    ``since`` before them reads from the first kept byte.
    """
    offset = max(since, dropped)
    end = offset + len(data)
    return ProcessOutput(
        data=data,
        offset=offset,
        next_offset=end,
        complete=ended and end >= size,
        dropped=dropped,
    )
