"""Commands that run once per step, even when the worker running the step dies.

Temporal retries an activity whose worker died; a plain ``exec`` in the
retry starts the command again, and the dead worker's command keeps running
beside it (a local command leads its own process group; a Docker exec
outlives its attach stream; envd runs a command on when its stream's client
is gone). :func:`exec_once` runs a
command under a :class:`~mango.domain.sandbox_ports.StepKey` instead
(deterministic across the retries of one step) over the sandbox's own
``exec``, and keeps what the step needs in the sandbox, in a provider-owned
directory (:attr:`StepRecords.directory`), one directory per command. A
provider offers it as
:meth:`~mango.domain.sandbox_ports.StepSandbox.exec_step` (local, Docker, E2B and Cube:
``exec_once(self, self.step_records, ...)``)::

    <directory>/<step>.<n>/
        start     when it started (``date +%s``; only for a command with a timeout)
        pid       the pid of the shell that runs it (it leads the command's process group)
        out, err  the first ``cap + 1`` bytes of stdout and of stderr, exactly as written
        exit      its exit status, written last (``lost``/``killed`` when it ended unrecorded)

The first attempt creates the directory (``mkdir``, atomic) and runs the
command with stdout and stderr going through FIFOs to the capped files (the
rest is read and discarded, as exec does). The two readers (children of
one shell, whose pid both ``*.pid`` files name) leave the command's tree
(started from a subshell that exits at once, in a session of their own where
the sandbox has ``setsid``): a tree kill of the command
(timeout, cancellation) leaves them to see end-of-file and write what they
kept (``out.done``, ``err.done``), so a timed-out step returns its output so
far, as exec does (``head -c`` writes only at its count or at end-of-file).
The shell level (``SHLVL``, where a shell sets it) is the direct exec's.

A retry that finds the directory never starts the command: it waits until
``exit`` exists (bounded by the step's timeout, counted from the first
start), or finds the run gone without a status (``lost``: exit code -1).
Then one more exec prints the files back, so the result carries the
per-stream cap and truncation flags exactly as the provider's exec reports
them, and ends as the command ended (a status 129 to 143 from a common
terminating signal is re-raised on the shell, so each provider reports it as
its exec does; a shell cannot tell ``exit 130`` from SIGINT).

A timeout (the provider's exec timeout on the first attempt, the step's
deadline on a retry) or a cancellation kills the recorded process group, so
a retried attempt never leaves the earlier run going. Records are bounded:
a step that starts fresh removes every other step's directory whose run has
ended (a session runs its steps one at a time, so what is left is the last
step's, kept for the replay of its result). A destroy removes the directory
with the sandbox (local removes it beside the run log; a container takes it
along).

Needs a POSIX ``sh`` with ``mkfifo``, ``head -c``, ``cat``, ``date`` and a
fractional ``sleep`` in the sandbox (coreutils or busybox).
"""

from __future__ import annotations

import asyncio
import contextlib
import math

import attrs

from mango.domain.errors import ProviderUnavailable
from mango.domain.ports import Sandbox
from mango.domain.sandbox_ports import StepKey, StepSandbox
from mango.domain.values import Command, ExecResult

__all__ = ["StepKey", "StepRecords", "StepSandbox", "exec_once"]

# Builtins only (``read``, not ``$(cat ...)``): the done-wait below calls it in a loop.
_ALIVE = (
    'mango_alive() { kill -0 "$1" 2>/dev/null || return 1; '
    '_mango_st=; read -r _mango_st 2>/dev/null < "/proc/$1/stat" || return 0; '
    "case ${_mango_st##*) } in Z*) return 1;; esac; return 0; }\n"
)

# The program lookup of execvp, as the kit's command line does it (mango.provider.shell).
_PROGRAM_CHECK = r"""case $1 in
*/*)
    if [ ! -e "$1" ]; then printf 'mango: %s: No such file or directory\n' "$1" >&2; exit 127; fi
    if [ -d "$1" ] || [ ! -x "$1" ]; then
        printf 'mango: %s: Permission denied\n' "$1" >&2; exit 126
    fi
    ;;
*)
    _mango_f=; set -f; IFS=:
    for _mango_c in $PATH; do
        if [ -f "${_mango_c:-.}/$1" ] && [ -x "${_mango_c:-.}/$1" ]; then _mango_f=1; break; fi
    done
    unset IFS; set +f
    if [ -z "$_mango_f" ]; then printf 'mango: %s: command not found\n' "$1" >&2; exit 127; fi
    ;;
esac
unset _mango_c _mango_f
"""

RUN_SCRIPT = (
    _ALIVE
    + r"""_mango_r=$1; _mango_s=$2; _mango_d=$1/$2.$3; _mango_t=$4; _mango_n=$5; shift 6
if ! { [ -d "$_mango_r" ] || mkdir -p "$_mango_r" 2>/dev/null; }; then
    printf 'mango: cannot make the step records %s\n' "$_mango_r" >&2; exit 125
fi
if mkdir "$_mango_d" 2>/dev/null; then
    [ "$_mango_t" = 0 ] || date +%s > "$_mango_d/start"
    printf '%s\n' "$$" > "$_mango_d/pid"
    for _mango_o in "$_mango_r"/*; do
        case ${_mango_o##*/} in "$_mango_s".*|'*') continue;; esac
        if [ -f "$_mango_o/exit" ] || [ ! -f "$_mango_o/pid" ] \
            || ! mango_alive "$(cat "$_mango_o/pid" 2>/dev/null)"; then
            rm -rf "$_mango_o"
        fi
    done
    if ! mkfifo "$_mango_d/o" "$_mango_d/e"; then
        printf 'lost\n' > "$_mango_d/exit"; exit 125
    fi
    command -v setsid > /dev/null 2>&1 && _mango_ss=setsid || _mango_ss=
    # One reader shell for both streams (its pid stands for both), in a session of its own.
    # An empty record means head met end-of-file: nothing is left to drain.
    ($_mango_ss sh -c 'echo $$ > "$2/out.pid"; echo $$ > "$2/err.pid"
for s in o:out e:err; do
    { head -c "$1" > "$2/${s#*:}"; : > "$2/${s#*:}.done"
        [ -s "$2/${s#*:}" ] && exec cat > /dev/null; } \
        < "$2/${s%%:*}" &
done
wait' mango-step "$_mango_n" "$_mango_d" < /dev/null &)
    (
        unset _mango_r _mango_s _mango_t _mango_n _mango_o _mango_st _mango_ss
        exec > "$_mango_d/o" 2> "$_mango_d/e"
        unset _mango_d
        case ${SHLVL-} in ''|*[!0-9]*) ;; *) SHLVL=$((SHLVL - 1));; esac
"""
    + _PROGRAM_CHECK
    + r"""        exec "$@"
    )
    _mango_x=$?
    for _mango_o in out err; do
        _mango_w=0.001
        while [ ! -f "$_mango_d/$_mango_o.done" ]; do
            _mango_p=; read -r _mango_p 2>/dev/null < "$_mango_d/$_mango_o.pid"
            mango_alive "$_mango_p" || break
            sleep "$_mango_w"; _mango_w=0.01
        done
    done
    printf '%s\n' "$_mango_x" > "$_mango_d/exit.tmp" && mv "$_mango_d/exit.tmp" "$_mango_d/exit"
    exit 0
fi
_mango_i=0
while [ ! -f "$_mango_d/exit" ]; do
    _mango_p=$(cat "$_mango_d/pid" 2>/dev/null)
    if [ -n "$_mango_p" ]; then
        if ! mango_alive "$_mango_p"; then
            [ -f "$_mango_d/exit" ] && break
            printf 'lost\n' > "$_mango_d/exit"; exit 3
        fi
    elif [ "$_mango_i" -gt 100 ]; then
        printf 'lost\n' > "$_mango_d/exit"; exit 3
    fi
    _mango_b=$(cat "$_mango_d/start" 2>/dev/null) || _mango_b=$(date +%s)
    if [ "$_mango_t" != 0 ] && [ $(($(date +%s) - _mango_b)) -ge "$_mango_t" ]; then exit 124; fi
    sleep 0.05
    _mango_i=$((_mango_i + 1))
done
exit 0
"""
)
"""``sh -c RUN_SCRIPT mango-step DIRECTORY STEP N TIMEOUT KEEP -- ARGV...``: start or wait."""

COLLECT_SCRIPT = r"""_mango_i=0
while [ ! -f "$1/out.done" ] || [ ! -f "$1/err.done" ]; do
    [ "$_mango_i" -ge 40 ] && break
    sleep 0.05; _mango_i=$((_mango_i + 1))
done
cat "$1/out" 2>/dev/null; cat "$1/err" >&2 2>/dev/null
_mango_x=; read -r _mango_x 2>/dev/null < "$1/exit"
case $_mango_x in ''|*[!0-9]*) exit 0;; esac
case $_mango_x in
129|130|137|138|140|141|142|143) trap - $((_mango_x - 128)); kill -$((_mango_x - 128)) $$;;
esac
exit "$_mango_x"
"""
"""``sh -c COLLECT_SCRIPT mango-step DIR``: print the kept output, end as the command did."""

KILL_SCRIPT = r"""[ -f "$1/exit" ] && exit 0
_mango_p=$(cat "$1/pid" 2>/dev/null)
case $_mango_p in
''|*[!0-9]*|0|1) ;;
*)
    kill -KILL -"$_mango_p" 2>/dev/null; kill -KILL "$_mango_p" 2>/dev/null
    _mango_i=0
    while kill -0 -"$_mango_p" 2>/dev/null && [ "$_mango_i" -lt 200 ]; do
        sleep 0.02; _mango_i=$((_mango_i + 1))
    done
    ;;
esac
[ -f "$1/exit" ] || printf 'killed\n' > "$1/exit"
exit 0
"""
"""``sh -c KILL_SCRIPT mango-step DIR``: kill the recorded run's process group (if not ended),
then wait (at most 4 s) until every process of it is gone (reaped)."""

_SETTLE_SECONDS = 30.0
"""Bound on the kill and collect execs."""
_LOST = 3
_DEADLINE = 124


@attrs.frozen
class StepRecords:
    """Where a sandbox keeps its step records, and its exec's per-stream output cap."""

    directory: str
    """An absolute path in the sandbox, owned by the provider (outside the workspace)."""
    output_cap: int
    """The per-stream cap of the sandbox's exec (the records keep one byte more)."""


def _script(script: str, *args: str, timeout: float = _SETTLE_SECONDS) -> Command:
    return Command(("/bin/sh", "-c", script, "mango-step", *args), timeout=timeout)


async def _kill(sandbox: Sandbox, directory: str) -> None:
    await sandbox.exec(_script(KILL_SCRIPT, directory))


async def exec_once(
    sandbox: Sandbox,
    records: StepRecords,
    key: StepKey,
    command: Command,
    *,
    timeout: float | None,
) -> ExecResult:
    """Run ``command`` in ``sandbox`` once for ``key``; a retry collects the first run's result.

    ``timeout`` is the command's effective timeout (its own, else the
    spec's; None: unbounded): the exec's own on the first attempt, and the
    bound on a retry's wait counted from the first start. The result is the
    one exec would give: capped streams, truncation flags, exit code;
    ``timed_out`` with exit code -1 after a timeout (with the output kept
    so far); a destroy meanwhile gives exec's ``cancelled`` result.
    Cancelling the call kills the command's process group, whichever
    attempt started it.
    """
    directory = f"{records.directory}/{key.name}"
    seconds = 0 if timeout is None else max(1, math.ceil(timeout))
    attempt = Command(
        (
            "/bin/sh",
            "-c",
            RUN_SCRIPT,
            "mango-step",
            records.directory,
            key.step,
            str(key.index),
            str(seconds),
            str(records.output_cap + 1),
            "--",
            *command.argv,
        ),
        env=command.env,
        cwd=command.cwd,
        stdin=command.stdin,
        timeout=command.timeout,
    )
    try:
        ran = await sandbox.exec(attempt)
    except asyncio.CancelledError:
        # The provider killed this attempt's tree; a retry's wait is not the run itself.
        killer = asyncio.ensure_future(_kill(sandbox, directory))
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.shield(killer)
        raise
    if ran.cancelled:
        return ran  # the sandbox was destroyed meanwhile: exec's own answer
    timed_out = ran.timed_out or ran.exit_code == _DEADLINE
    if timed_out:
        await _kill(sandbox, directory)
    elif ran.exit_code not in (0, _LOST):
        raise ProviderUnavailable(
            f"the step record {directory} could not be kept (exit {ran.exit_code}): "
            f"{ran.stderr[:200].decode(errors='replace')}"
        )
    collected = await sandbox.exec(_script(COLLECT_SCRIPT, directory))
    if collected.cancelled:
        return collected
    if timed_out:
        return attrs.evolve(collected, exit_code=-1, timed_out=True)
    if ran.exit_code == _LOST:
        return attrs.evolve(collected, exit_code=-1)
    return collected
