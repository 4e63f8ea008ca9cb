"""``mango exec``: run a command in a Session's sandbox, here or through Temporal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import attrs
import click

from mango.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    VIA_TEMPORAL_HELP,
    load_settings,
    run_async,
    session_id_arg,
    use_temporal,
    with_runtime,
)
from mango.cli.environment import environment_options, resolve_environment
from mango.cli.params import Seconds
from mango.domain.errors import MangoError, PermanentError
from mango.domain.progress import progress_scope
from mango.domain.values import Command, ExecResult, OutputChunk, OutputStream

if TYPE_CHECKING:
    from mango.domain.ports import Sandbox
    from mango.runtime import Runtime

__all__ = ["exec_"]


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option(
    "--timeout",
    type=Seconds(),
    help="Seconds before the command is terminated.",
)
@click.option("--cwd", default="", help="Working directory, relative to the workspace.")
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Extra environment (repeatable).",
)
@click.option(
    "--stdin", "use_stdin", is_flag=True, help="Pass this process's standard input to the command."
)
@click.option("--via-temporal/--direct", "via_temporal", default=None, help=VIA_TEMPORAL_HELP)
@click.option(
    "--max-wait",
    type=Seconds(),
    metavar="SECONDS",
    help="With --via-temporal: how long to wait while the provider is unavailable (attempts "
    "fail and are retried) before giving up. Default: MANGO_TEMPORAL_MAX_WAIT, else 120.",
)
@environment_options
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(  # noqa: PLR0917 - click passes every option as an argument
    session_id: str,
    timeout: float | None,
    cwd: str,
    env_pairs: tuple[str, ...],
    use_stdin: bool,
    via_temporal: bool | None,
    max_wait: float | None,
    profile: str | None,
    packages: tuple[str, ...],
    network: str | None,
    allow_hosts: tuple[str, ...],
    argv: tuple[str, ...],
) -> None:
    """Run ARGV in the Session's sandbox and exit with its exit code.

    Output is written as it arrives (with --via-temporal: when the command has
    finished). Interrupting mango (Ctrl-C, SIGTERM) kills the command.

    The environment options (--profile, --package, --network, --allow-host)
    shape the sandbox made on the Session's first use; a provider that cannot
    run it refuses before anything is written (exit 2, every reason listed).
    Packages install before the command runs, and mango says what it installs.

    \b
    Example:
      mango exec --session demo -- sh -c 'echo hello > note.txt'
      mango exec --session demo -- cat note.txt
      mango exec --session py --package pip:requests==2.32.3 --package apt:jq -- jq --version
    """
    session_id = session_id_arg(session_id)
    stdin = sys.stdin.buffer.read() if use_stdin else b""
    try:
        command = Command(argv, stdin=stdin, env=_parse_env(env_pairs), cwd=cwd, timeout=timeout)
    except MangoError as exc:
        raise click.BadParameter(str(exc)) from None
    settings = load_settings()
    spec = resolve_environment(settings, profile, packages, network, allow_hosts)

    def report(line: str) -> None:
        click.echo(f"mango: {line}", err=True)

    if use_temporal(via_temporal):
        from mango.cli.durable import exec_via_temporal

        sys.exit(
            _emit(
                run_async(
                    lambda: exec_via_temporal(
                        settings, session_id, command, spec=spec, max_wait=max_wait, on_wait=report
                    )
                )
            )
        )

    async def run(rt: Runtime) -> int:
        await rt.manager.ensure_session(session_id, spec)
        with progress_scope(report):
            sandbox = await rt.manager.acquire(session_id, spec)
        # A command is a tool step: the Session's File Resources are in place first,
        # and it is one step of its Memory Store wave.
        await rt.manager.materialize(session_id, spec)
        async with rt.manager.tool_step(session_id, spec) as step:
            result = await _stream(sandbox, command)
        if step.failure is not None:
            result = attrs.evolve(result, memory_writeback_error=step.failure)
        return _emit(result)

    sys.exit(with_runtime(run))


async def _stream(sandbox: Sandbox, command: Command) -> ExecResult:
    """Write the command's output to ours as it arrives; return the final result.

    Leaving early (Ctrl-C cancels the task) kills the command: that is the
    stream's contract.
    """
    targets = {OutputStream.STDOUT: sys.stdout.buffer, OutputStream.STDERR: sys.stderr.buffer}
    async with sandbox.exec_stream(command) as events:
        async for event in events:
            if isinstance(event, OutputChunk):
                target = targets[event.stream]
                target.write(event.data)
                target.flush()
            else:
                return event
    raise PermanentError("the sandbox's output stream ended without a result")


def _emit(result: ExecResult) -> int:
    """Print a command's output (if any is still held) and return ``mango exec``'s exit code."""
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.buffer.flush()
    for stream, truncated in (
        ("stdout", result.stdout_truncated),
        ("stderr", result.stderr_truncated),
    ):
        if truncated:
            click.echo(f"mango: {stream} was truncated at the output cap", err=True)
    if result.memory_writeback_error is not None:
        click.echo(f"mango: {result.memory_writeback_error}", err=True)
    if result.timed_out:
        click.echo("mango: the command timed out and was terminated", err=True)
        return EXIT_TIMEOUT
    if result.cancelled:
        click.echo(
            "mango: the command was stopped: its Session's sandbox was deleted while it ran",
            err=True,
        )
        return EXIT_INTERRUPTED
    code = result.exit_code if 0 <= result.exit_code <= 255 else 1
    # A command whose Memory Store changes were discarded did not do all it was asked.
    return 1 if code == 0 and result.memory_writeback_error is not None else code
