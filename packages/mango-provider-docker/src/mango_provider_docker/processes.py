"""Background processes inside a container: a POSIX ``sh`` supervisor per process.

Where the records live, and why: in the container, under
:data:`PROCS_ROOT` (``/tmp/.mango-processes/<id>/``), never on the host. The
container is the sandbox, so its processes' records go where the processes
go: a destroy removes the container, which ends every process and removes
every record at once, and containers made before this feature need no new
mount (a host-side bind mount would change the container's configuration,
which attach checks mount by mount). The workspace file tools cannot reach
it (their path policy is ``/workspace`` and the resource mounts); a command
in the sandbox can, as it can reach everything else of its own sandbox.

Each process directory holds::

    meta.json        id, argv, start time (written by the launcher)
    stdin            a FIFO, held open read-write by the process: it never reads end-of-file
    out              a FIFO: the command's stdout and stderr, read into the log
    stdin.initial    Command.stdin, until it has been written to the FIFO
    pid.json         {"pid": N, "start": T}: the command's pid and /proc start time
    supervisor       "<pid> <start time>" of the supervisor shell
    log.<offset>     the capped log, in segments of CAP / 8 bytes, oldest removed first
    kill             present once the process was killed (or its timeout passed)
    exit.json        {"state": ..., "exit_code": N}, written last

Every operation is one exec of a short script (:data:`LAUNCHER`,
:data:`LIST`, :data:`READ_LOG`, :data:`WAIT`, :data:`KILL`,
:data:`SEND_STDIN`); the supervisor (:data:`SUPERVISOR`) runs the command
through the exec wrapper (so the working directory, ``command not found``
and the environment are those of ``exec``) as a new session (``setsid``),
reads its output with ``dd`` (one read per call, so nothing waits for a full
block) into segments, and writes ``exit.json`` once the output has ended.
A kill signals the process group and the tree (the kit's tree killer) only
while the recorded pid still has the recorded start time (pid reuse).
A container that was stopped and started again lost its processes: a record
whose supervisor is gone without an ``exit.json`` is reported ``killed``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from mango.provider import (
    Command,
    ExecResult,
    InvalidInput,
    PermanentError,
    ProcessHandle,
    ProcessInfo,
    ProcessNotFound,
    ProcessOutput,
    ProcessState,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.provider.shell import TREE_KILLER
from mango_provider_docker.commands import SHELL, wrapper_error
from mango_provider_docker.scripts import EXEC_WRAPPER

__all__ = [
    "KILL",
    "LAUNCHER",
    "LIST",
    "PROCS_ROOT",
    "READ_LOG",
    "SEND_STDIN",
    "SUPERVISOR",
    "WAIT",
    "ContainerProcesses",
]

PROCS_ROOT = "/tmp/.mango-processes"  # noqa: S108 - in the container, provider-owned
"""Where the records of a container's background processes live, inside it."""
WAIT_SLICE_SECONDS = 10.0
"""A wait longer than this is several execs (each bounded, so a lost one costs little)."""
KILL_WAIT_SECONDS = 10.0
"""How long a kill waits for the supervisor to record the end."""
_HEADER_ROOM = 256

_START_TIME = r"""_mango_start() {
    _x=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    set -- ${_x##*) }
    printf '%s' "${20}"
}
"""
"""``_mango_start PID``: the start time (clock ticks since boot) of PID, or failure."""

SUPERVISOR = (
    _START_TIME
    + r"""_d=$1 _cap=$2 _t=$3 _w=$4 _cwd=$5; shift 5
_seg=$((_cap / 8)); [ "$_seg" -ge 1 ] || _seg=1
printf '%s %s\n' "$$" "$(_mango_start $$)" > "$_d/supervisor"
if [ -s "$_d/stdin.initial" ]; then
    { cat "$_d/stdin.initial" > "$_d/stdin"; rm -f "$_d/stdin.initial"; } &
    _feeder=$!
fi
_capture() {
    IFS= read -r _s || _s=
    case $_s in
    mango-exec:*) _pid=${_s#mango-exec:} ;;
    *) printf '%s\n' "${_s#mango-exec-error:}" > "$_d/start-error"; cat > /dev/null; return ;;
    esac
    printf '{"pid": %s, "start": "%s"}\n' "$_pid" "$(_mango_start "$_pid")" > "$_d/pid.tmp"
    mv "$_d/pid.tmp" "$_d/pid.json"
    _tp=
    if [ "$_t" != 0 ]; then
        sh -c 'trap "kill \$s 2>/dev/null; exit 0" TERM; sleep "$1" & s=$!; wait "$s" || exit 0
            [ -e "$2/exit.json" ] || { : > "$2/kill"; kill -9 -- "-$3" 2>/dev/null; }' \
            mango-timer "$_t" "$_d" "$_pid" &
        _tp=$!
    fi
    _off=0 _size=$_seg _segs= _f=
    while :; do
        if [ "$_size" -ge "$_seg" ]; then
            _f=$_d/log.$_off; : > "$_f"; _segs="$_segs $_off"; _size=0
        fi
        dd bs=$((_seg - _size)) count=1 2>/dev/null >> "$_f"
        _n=$(stat -c %s "$_f"); _n=$((_n - _size))
        [ "$_n" -gt 0 ] || break
        _size=$((_size + _n)); _off=$((_off + _n))
        set -- $_segs
        while [ $# -gt 1 ] && [ $((_off - $1)) -gt "$_cap" ]; do rm -f "$_d/log.$1"; shift; done
        _segs="$*"
    done
    [ -z "$_tp" ] || kill "$_tp" 2>/dev/null
}
mkfifo "$_d/out"
_capture < "$_d/out" &
_cp=$!
# The redirections happen in the child: busybox prints a killed job's "Killed" on the
# waiting shell's own output, which is the supervisor's (/dev/null), never the log.
setsid sh -c 'exec <> "$1/stdin" > "$1/out" 2>&1; shift; exec sh -c "$@"' \
    mango-run "$_d" "$_w" sh "$_cwd" "$@"
echo $? > "$_d/rc"
wait "$_cp"
[ -z "$_feeder" ] || kill "$_feeder" 2>/dev/null
[ -e "$_d/start-error" ] && exit 0
_rc=$(cat "$_d/rc" 2>/dev/null); _rc=${_rc:-255}
if [ -e "$_d/kill" ]; then
    _state=killed; [ "$_rc" -le 128 ] || _rc=$((128 - _rc))
else
    _state=exited
fi
printf '{"state": "%s", "exit_code": %s}\n' "$_state" "$_rc" > "$_d/exit.tmp"
mv "$_d/exit.tmp" "$_d/exit.json"
"""
)
"""``sh -c SUPERVISOR mango-supervise DIR CAP TIMEOUT WRAPPER CWD ARGV...``."""

LAUNCHER = r"""_d=$1 _meta=$2 _sup=$3; shift 3
mkdir -p "${_d%/*}" && mkdir "$_d" && mkfifo "$_d/stdin" || exit 1
cat > "$_d/stdin.initial"
printf '%s\n' "$_meta" > "$_d/meta.json"
setsid sh -c "$_sup" mango-supervise "$_d" "$@" < /dev/null > /dev/null 2>&1 &
_i=0
while [ "$_i" -lt 2000 ]; do
    if [ -e "$_d/pid.json" ]; then printf 'pid '; cat "$_d/pid.json"; exit 0; fi
    if [ -e "$_d/start-error" ]; then
        printf 'error %s\n' "$(cat "$_d/start-error")"; rm -rf "$_d"; exit 0
    fi
    sleep 0.005; _i=$((_i + 1))
done
exit 2
"""
"""``sh -c LAUNCHER sh DIR META SUPERVISOR CAP TIMEOUT WRAPPER CWD ARGV...`` (stdin: the
command's); prints ``pid <pid.json>`` or ``error <reason>``."""

_DESCRIBE = (
    _START_TIME
    + r"""_mango_lost() {
    [ ! -e "$1/exit.json" ] && read -r _sp _ss < "$1/supervisor" 2>/dev/null &&
        [ "$(_mango_start "$_sp")" != "$_ss" ] && [ ! -e "$1/exit.json" ]
}
_mango_describe() {
    printf '== %s\n' "${1##*/}"
    for _k in meta pid exit; do
        [ -f "$1/$_k.json" ] && { printf '%s ' "$_k"; cat "$1/$_k.json"; }
    done
    ! _mango_lost "$1" || printf 'lost\n'
}
"""
)

LIST = (
    _DESCRIBE
    + r"""[ -d "$1" ] || exit 0
for _p in $(ls "$1" | sort); do _mango_describe "$1/$_p"; done
"""
)
"""``sh -c LIST sh ROOT``: every process record, oldest first."""

WAIT = (
    _DESCRIBE
    + r"""[ -f "$1/meta.json" ] || { printf 'missing\n'; exit 0; }
_i=0
while [ ! -e "$1/exit.json" ] && [ "$_i" -lt "$2" ] && ! _mango_lost "$1"; do
    sleep 0.05; _i=$((_i + 1))
done
_mango_describe "$1"
"""
)
"""``sh -c WAIT sh DIR TICKS``: wait up to TICKS x 50 ms for the end, then describe it."""

READ_LOG = r"""_d=$1 _since=$2 _want=$3
[ -f "$_d/meta.json" ] || { printf 'missing\n'; exit 0; }
_e=0; [ -e "$_d/exit.json" ] && _e=1
set -- $(ls "$_d" | sed -n 's/^log\.\([0-9][0-9]*\)$/\1/p' | sort -n)
[ $# -gt 0 ] || { printf '%s 0 0\n' "$_e"; exit 0; }
for _l; do :; done
printf '%s %s %s\n' "$_e" "$1" $(( _l + $(stat -c %s "$_d/log.$_l") ))
_pos=$_since; [ "$_pos" -ge "$1" ] || _pos=$1
while [ $# -gt 0 ] && [ "$_want" -gt 0 ]; do
    _s=$1; shift
    if [ $# -gt 0 ] && [ "$1" -le "$_pos" ]; then continue; fi
    exec 3< "$_d/log.$_s"
    _z=$(stat -L -c %s /proc/self/fd/3)
    _skip=$((_pos - _s)); _take=$((_z - _skip))
    if [ "$_take" -gt 0 ]; then
        [ "$_take" -le "$_want" ] || _take=$_want
        tail -c +$((_skip + 1)) <&3 | head -c "$_take"
        _want=$((_want - _take)); _pos=$((_pos + _take))
    fi
    exec 3<&-
done
"""
"""``sh -c READ_LOG sh DIR SINCE MAX``: ``ENDED FIRST END`` on one line, then the bytes."""

KILL = (
    _START_TIME
    + r"""_d=$1 _killer=$2
[ -f "$_d/meta.json" ] || { printf 'missing\n'; exit 0; }
[ -e "$_d/exit.json" ] || : > "$_d/kill"
_j=$(cat "$_d/pid.json" 2>/dev/null) || exit 0
_pid=${_j#*\"pid\": }; _pid=${_pid%%,*}
_st=${_j#*\"start\": \"}; _st=${_st%%\"*}
_now=$(_mango_start "$_pid") || _now=
if [ -z "$_now" ] || [ "$_now" = "$_st" ]; then
    kill -9 -- "-$_pid" 2>/dev/null
    [ -z "$_now" ] || sh -c "$_killer" mango-kill "$_pid"
fi
:
"""
)
"""``sh -c KILL sh DIR TREE_KILLER``: mark, then kill the group and the tree (pid checked)."""

SEND_STDIN = r"""[ -f "$1/meta.json" ] || { printf 'missing\n'; exit 0; }
[ ! -e "$1/exit.json" ] || { printf 'ended\n'; exit 0; }
cat > "$1/stdin" && printf 'sent\n'
"""
"""``sh -c SEND_STDIN sh DIR`` with the bytes as stdin."""


def _process_id() -> str:
    return f"p-{time.time_ns():016x}-{secrets.token_hex(4)}"


def _check_id(process_id: object) -> str:
    if (
        not isinstance(process_id, str)
        or not process_id.startswith("p-")
        or not all(c in "0123456789abcdef-p" for c in process_id)
        or len(process_id) > 40
    ):
        raise ProcessNotFound(str(process_id))
    return process_id


def _parse(lines: Sequence[bytes]) -> list[ProcessInfo]:
    """The ``== id`` blocks of :data:`LIST` and :data:`WAIT` as infos."""
    infos: list[ProcessInfo] = []
    records: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith(b"== "):
            records.append({"id": line[3:].decode()})
        elif records and line == b"lost":
            records[-1]["lost"] = True
        elif records and b" " in line:
            key, _, value = line.partition(b" ")
            try:
                records[-1][key.decode()] = json.loads(value)
            except ValueError:
                continue
    for record in records:
        meta = record.get("meta")
        if not isinstance(meta, dict):
            continue
        ended = record.get("exit")
        pid = record.get("pid")
        state, exit_code = ProcessState.RUNNING, None
        if isinstance(ended, dict):
            state = ProcessState(ended.get("state", "exited"))
            exit_code = ended.get("exit_code")
        elif record.get("lost"):
            state = ProcessState.KILLED
        started = meta.get("started_at")
        infos.append(
            ProcessInfo(
                id=record["id"],
                argv=tuple(meta.get("argv", ())),
                state=state,
                pid=pid.get("pid") if isinstance(pid, dict) else None,
                exit_code=exit_code,
                started_at=datetime.fromisoformat(started) if isinstance(started, str) else None,
            )
        )
    return infos


Runner = Callable[[Command], Awaitable[ExecResult]]


class ContainerProcesses:
    """The :class:`~mango.provider.ProcessSandbox` operations over one container's exec."""

    def __init__(
        self,
        run: Runner,
        *,
        log_cap: int,
        output_cap: int,
        gone: Callable[[], Awaitable[bool]],
    ) -> None:
        self._run = run
        self._log_cap = log_cap
        self._output_cap = output_cap
        self._gone = gone

    async def _sh(
        self,
        script: str,
        *args: str,
        stdin: bytes = b"",
        timeout: float = 60.0,
        env: Sequence[tuple[str, str]] = (),
    ) -> ExecResult:
        command = Command((SHELL, "-c", script, "sh", *args), stdin=stdin, timeout=timeout, env=env)
        try:
            result = await self._run(command)
        except ProviderUnavailable as exc:
            # An exec that meets a destroy half-way fails to start: say what happened.
            if await self._gone():
                raise SandboxNotFound("the container is gone or being destroyed") from exc
            raise
        if result.cancelled and await self._gone():
            raise SandboxNotFound("the container is gone or being destroyed")
        if result.timed_out or result.cancelled:
            raise ProviderUnavailable(
                f"a background-process call in the container did not finish within {timeout}s"
            )
        return result

    async def start(self, command: Command) -> ProcessHandle:
        """Launch ``command`` under its supervisor; return once it runs (or could not)."""
        process_id = _process_id()
        directory = f"{PROCS_ROOT}/{process_id}"
        meta = json.dumps(
            {
                "id": process_id,
                "argv": list(command.argv),
                "started_at": datetime.now(UTC).isoformat(),
            }
        )
        timeout = repr(float(command.timeout)) if command.timeout else "0"
        result = await self._sh(
            LAUNCHER,
            directory,
            meta,
            SUPERVISOR,
            str(self._log_cap),
            timeout,
            EXEC_WRAPPER,
            command.cwd or "",
            *command.argv,
            stdin=command.stdin,
            # Inherited by the launcher, the supervisor and the command: as for exec.
            env=command.env,
        )
        answer = result.stdout.strip()
        if answer.startswith(b"error "):
            raise wrapper_error(answer[6:].decode(errors="replace").strip())
        if result.exit_code != 0 or not answer.startswith(b"pid "):
            raise ProviderUnavailable(
                f"background process {process_id} did not start (exit {result.exit_code}): "
                f"{result.stderr[:200].decode(errors='replace')}"
            )
        pid = json.loads(answer[4:]).get("pid")
        return ProcessHandle(process_id, pid if isinstance(pid, int) else None)

    async def processes(self) -> list[ProcessInfo]:
        """Every record, oldest first."""
        result = await self._sh(LIST, PROCS_ROOT)
        return _parse(result.stdout.splitlines())

    async def _describe(self, process_id: str, ticks: int) -> ProcessInfo:
        directory = f"{PROCS_ROOT}/{_check_id(process_id)}"
        result = await self._sh(WAIT, directory, str(ticks), timeout=ticks * 0.05 + 60.0)
        infos = _parse(result.stdout.splitlines())
        if not infos:
            raise ProcessNotFound(process_id)
        return infos[0]

    async def logs(self, process_id: str, since: int, max_bytes: int | None) -> ProcessOutput:
        """One slice of the log (at most the exec output cap per call)."""
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise InvalidInput(f"since must be a byte offset (0 or more), got {since!r}")
        limit = self._output_cap - _HEADER_ROOM if max_bytes is None else max_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        limit = min(limit, max(self._output_cap - _HEADER_ROOM, 1))
        directory = f"{PROCS_ROOT}/{_check_id(process_id)}"
        for _ in range(8):
            result = await self._sh(READ_LOG, directory, str(since), str(limit))
            header, _, data = result.stdout.partition(b"\n")
            if header == b"missing":
                raise ProcessNotFound(process_id)
            fields = header.split()
            if result.exit_code == 0 and len(fields) == 3 and all(f.isdigit() for f in fields):
                ended, first, end = (int(field) for field in fields)
                offset = max(since, first) if end else since
                if offset > end:
                    return ProcessOutput(b"", since, since, complete=bool(ended), dropped=first)
                next_offset = offset + len(data)
                return ProcessOutput(
                    data,
                    offset,
                    next_offset,
                    complete=bool(ended) and next_offset >= end,
                    dropped=first,
                )
            # A segment was pruned between the listing and the read: read again.
        raise ProviderUnavailable(f"the log of {process_id} is pruned faster than it is read")

    async def wait(self, process_id: str, timeout: float | None) -> ProcessInfo:
        """Wait in slices of at most :data:`WAIT_SLICE_SECONDS`, each one exec."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = WAIT_SLICE_SECONDS
            if deadline is not None:
                remaining = min(remaining, max(deadline - time.monotonic(), 0.0))
            info = await self._describe(process_id, int(remaining / 0.05))
            if info.state is not ProcessState.RUNNING:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                return info

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """Write ``data`` to the FIFO; PermanentError if the process has ended."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"send_stdin() takes bytes, got {type(data).__name__}")
        directory = f"{PROCS_ROOT}/{_check_id(process_id)}"
        result = await self._sh(SEND_STDIN, directory, stdin=bytes(data))
        answer = result.stdout.strip()
        if answer == b"missing":
            raise ProcessNotFound(process_id)
        if answer == b"ended":
            raise PermanentError(f"background process {process_id} has ended: no stdin")
        if answer != b"sent":
            raise ProviderUnavailable(f"could not write to the stdin of {process_id}")

    async def kill(self, process_id: str) -> ProcessInfo:
        """Kill the group and the tree, then wait (bounded) for the end to be recorded."""
        directory = f"{PROCS_ROOT}/{_check_id(process_id)}"
        result = await self._sh(KILL, directory, TREE_KILLER)
        if result.stdout.strip() == b"missing":
            raise ProcessNotFound(process_id)
        info = await self.wait(process_id, KILL_WAIT_SECONDS)
        if info.state is ProcessState.RUNNING:
            raise ProviderUnavailable(
                f"background process {process_id} was killed but its end was not recorded "
                f"within {KILL_WAIT_SECONDS:.0f}s"
            )
        return info
