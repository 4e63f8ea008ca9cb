"""``mango processes``: background processes of a Session's sandbox.

Every command is its own process, as a worker after a restart is: a process
started by one ``mango processes start`` is listed, read, waited for and
killed by later commands, by its id, as long as the sandbox lives. Only a
provider that declares ``background-processes`` has them (local and docker);
elsewhere each command fails with ``error:`` and ``hint:`` before touching
the sandbox.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import EXIT_TIMEOUT, session_id_arg, with_runtime
from mango.cli.execute import _parse_env
from mango.cli.output import echo_json, echo_table
from mango.cli.params import Seconds
from mango.domain.errors import InvalidInput, MangoError
from mango.domain.sandbox_ports import ProcessInfo, ProcessState
from mango.domain.values import Command

if TYPE_CHECKING:
    from mango.domain.ports import ProcessSandbox
    from mango.runtime import Runtime

__all__ = ["EXIT_KILLED", "FOLLOW_POLL_SECONDS", "processes"]

EXIT_KILLED = 137
"""``mango processes wait``'s exit code for a killed process (128 + SIGKILL, as shells say)."""
FOLLOW_POLL_SECONDS = 0.2
"""How often ``logs --follow`` asks for more while nothing new has come."""


async def _existing(rt: Runtime, session_id: str) -> ProcessSandbox:
    """The Session's bound sandbox as a process sandbox; never provisions one."""
    sandbox = await rt.manager.processes(session_id, rt.default_spec(), provision=False)
    if sandbox is None:
        raise InvalidInput(
            f"no session {session_id!r} with a sandbox",
            hint="check the id with 'mango sessions list'; 'mango processes start' makes one",
        )
    return sandbox


def _row(info: ProcessInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "state": info.state.value,
        "exit_code": info.exit_code,
        "pid": info.pid,
        "started_at": None if info.started_at is None else info.started_at.isoformat(),
        "argv": list(info.argv),
    }


@click.group()
def processes() -> None:
    """Start background processes in a Session's sandbox, and reconnect to them."""


@processes.command(name="start", context_settings={"ignore_unknown_options": True})
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option("--timeout", type=Seconds(), help="Seconds before the process tree is killed.")
@click.option("--cwd", default="", help="Working directory, relative to the workspace.")
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE", help="Extra environment.")
@click.option(
    "--stdin",
    "use_stdin",
    is_flag=True,
    help="Give this process's standard input to the command first (its stdin stays open).",
)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def processes_start(  # noqa: PLR0917 - click passes every option as an argument
    session_id: str,
    timeout: float | None,
    cwd: str,
    env_pairs: tuple[str, ...],
    use_stdin: bool,
    argv: tuple[str, ...],
) -> None:
    """Start ARGV in the background and print its id.

    \b
    Example:
      mango processes start --session demo -- sh -c 'while :; do date; sleep 1; done'
      mango processes logs --session demo --follow ID
    """
    session_id = session_id_arg(session_id)
    stdin = sys.stdin.buffer.read() if use_stdin else b""
    try:
        command = Command(argv, stdin=stdin, env=_parse_env(env_pairs), cwd=cwd, timeout=timeout)
    except MangoError as exc:
        raise click.BadParameter(str(exc)) from None

    async def run(rt: Runtime) -> str:
        spec = rt.default_spec()
        # Refused (undeclared) before the Session row or a sandbox is made; never provisions.
        sandbox = await rt.manager.processes(session_id, spec, provision=False)
        if sandbox is None:
            await rt.manager.ensure_session(session_id, spec)
            sandbox = await rt.manager.processes(session_id, spec)
        if sandbox is None:  # pragma: no cover - provision=True always gives one
            raise InvalidInput(f"session {session_id!r} has no sandbox")
        # A process is a tool step: the Session's File Resources are in place first.
        await rt.manager.materialize(session_id, spec)
        return (await sandbox.start(command)).id

    click.echo(with_runtime(run))


@processes.command(name="ls")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def processes_ls(session_id: str, as_json: bool) -> None:
    """List the Session's background processes, oldest first."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        sandbox = await _existing(rt, session_id)
        return [_row(info) for info in await sandbox.processes()]

    rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "state", "exit", "pid", "started", "command"],
        [
            (
                row["id"],
                row["state"],
                "-" if row["exit_code"] is None else row["exit_code"],
                "-" if row["pid"] is None else row["pid"],
                row["started_at"] or "-",
                " ".join(row["argv"]),
            )
            for row in rows
        ],
    )


@processes.command(name="logs")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option(
    "--since",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="OFFSET",
    help="Byte offset of the log to start from.",
)
@click.option("--follow", is_flag=True, help="Keep printing until the process has ended.")
@click.argument("process_id", metavar="ID")
def processes_logs(session_id: str, since: int, follow: bool, process_id: str) -> None:
    """Print the process's output (stdout and stderr as written), byte for byte.

    Without --follow, what the log holds now; with it, until the process has
    ended. Bytes dropped by the log cap (MANGO_MAX_PROCESS_LOG_BYTES) are
    reported on stderr.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        sandbox = await _existing(rt, session_id)
        position = since
        out = sys.stdout.buffer
        while True:
            output = await sandbox.logs(process_id, since=position)
            if output.offset > position:
                click.echo(
                    f"mango: {output.offset - position} byte(s) before offset {output.offset} "
                    "were dropped by the log cap",
                    err=True,
                )
            out.write(output.data)
            out.flush()
            position = output.next_offset
            if output.complete or (not follow and not output.data):
                return
            if not output.data:
                await asyncio.sleep(FOLLOW_POLL_SECONDS)

    with_runtime(run)


@processes.command(name="wait")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--timeout", type=Seconds(), help="Give up waiting after this many seconds.")
@click.argument("process_id", metavar="ID")
def processes_wait(session_id: str, timeout: float | None, process_id: str) -> None:
    """Wait for the process to end; print its state and exit with its exit code.

    Still running when --timeout passes: exit 124 (the process runs on).
    Killed: exit 137.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> ProcessInfo:
        sandbox = await _existing(rt, session_id)
        return await sandbox.wait(process_id, timeout=timeout)

    info = with_runtime(run)
    code_text = "" if info.exit_code is None else f" {info.exit_code}"
    click.echo(f"{info.id} {info.state.value}{code_text}")
    if info.state is ProcessState.RUNNING:
        sys.exit(EXIT_TIMEOUT)
    if info.state is ProcessState.KILLED:
        sys.exit(EXIT_KILLED)
    code = info.exit_code if info.exit_code is not None else 1
    sys.exit(code if 0 <= code <= 255 else 1)


@processes.command(name="kill")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.argument("process_id", metavar="ID")
def processes_kill(session_id: str, process_id: str) -> None:
    """Kill the process and its whole tree (harmless if it has ended); print its state."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> ProcessInfo:
        sandbox = await _existing(rt, session_id)
        return await sandbox.kill(process_id)

    info = with_runtime(run)
    click.echo(f"{info.id} {info.state.value}")
