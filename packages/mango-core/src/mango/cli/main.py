"""``mango``: run commands in a Session's durable sandbox and manage Sessions.

Every command reads its configuration from the environment (see the README's
configuration table). Expected failures print one ``error:`` line and, where
there is one, a ``hint:`` line; never a traceback.

Start-up time matters here (an agent may run hundreds of commands): only
click, attrs and mango's own light modules are imported up front. The
database driver, the plugins and Temporal are imported by the commands that
use them, and the embedded PostgreSQL is left running between commands
(``MANGO_EMBEDDED_IDLE_SECONDS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from mango.cli.output import echo_json, echo_table
from mango.cli.store import store as store_command
from mango.cli.worker import worker as worker_command
from mango.config import Settings
from mango.domain.errors import InvalidInput, MangoError, PermanentError
from mango.domain.values import (
    Command,
    ExecResult,
    OutputChunk,
    OutputStream,
    validate_session_id,
)

if TYPE_CHECKING:
    from mango.domain.ports import Sandbox
    from mango.runtime import Runtime

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_TIMEOUT", "cli", "main"]

T = TypeVar("T")

EXIT_ERROR = 2
"""Every expected failure: bad input or settings, an unreachable part, a failed check."""
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
"""SIGINT (128 + 2)."""
EXIT_TERMINATED = 143
"""SIGTERM (128 + 15)."""


def _fail(message: str, hint: str | None = None, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def _run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning mango errors into one clear line.

    SIGINT and SIGTERM both cancel it, and a cancelled command is killed (its
    process tree, wherever it runs) before we exit, so no work outlives
    ``mango``. Further signals during that clean-up are ignored: SIGKILL is
    the way to leave without it.
    """
    terminated = False

    async def main() -> T:
        nonlocal terminated
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - asyncio.run runs us in a task

        def on_sigterm() -> None:
            nonlocal terminated
            if not terminated:
                terminated = True
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await factory()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(main())
    except MangoError as exc:
        _fail(str(exc), exc.hint)
    except KeyboardInterrupt:
        _fail("interrupted", code=EXIT_INTERRUPTED)
    except asyncio.CancelledError:
        if terminated:
            _fail("terminated", code=EXIT_TERMINATED)
        raise
    except OSError as exc:
        _fail(f"{exc.strerror or exc} ({exc.filename or 'no file'})")


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except MangoError as exc:
        _fail(str(exc), exc.hint)


def _via_temporal(flag: bool | None) -> bool:
    """``--via-temporal`` as given, else on exactly when MANGO_TEMPORAL_ADDRESS is set."""
    if flag is not None:
        return flag
    return bool(os.environ.get("MANGO_TEMPORAL_ADDRESS", "").strip())


_VIA_TEMPORAL_HELP = (
    "Go through the Session's Temporal workflow and a worker (the durable path) instead "
    "of calling the provider here. Default: on when MANGO_TEMPORAL_ADDRESS is set."
)


def _session(value: str) -> str:
    try:
        return validate_session_id(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


class _MangoGroup(click.Group):
    """A group whose commands never print a traceback for expected errors."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MangoError as exc:
            _fail(str(exc), exc.hint)


@click.group(cls=_MangoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log progress to stderr.")
@click.version_option(package_name="mango-core", prog_name="mango")
def cli(verbose: bool) -> None:
    """mango: one durable sandbox per AI-agent Session, on any backend.

    The provider is chosen by MANGO_SANDBOX (default: local). With no
    MANGO_DATABASE_URL, a private PostgreSQL is started under the state
    directory (MANGO_STATE_DIR).
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# ---------------------------------------------------------------- providers


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def providers(as_json: bool) -> None:
    """List installed sandbox providers, their support level and capabilities."""
    settings = _settings()
    from mango.plugins import load_plugins

    registry = load_plugins().providers()
    rows: list[dict[str, Any]] = [
        {
            "name": reg.name,
            "selected": reg.name == settings.sandbox,
            "support_level": reg.support_level.value,
            "capabilities": list(reg.capabilities.names()),
            "description": reg.description,
            "quirks": sorted(quirk.value for quirk in reg.quirks),
            # Names, defaults and whether each is set; never a value (secrets stay in the env).
            "settings": [
                {
                    "env": spec.env,
                    "description": spec.description,
                    "default": None if spec.secret else spec.default,
                    "required": spec.required,
                    "secret": spec.secret,
                    "set": bool(os.environ.get(spec.env, "").strip()),
                }
                for spec in reg.settings
            ],
        }
        for reg in registry
    ]
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["", "name", "support", "capabilities"],
        [
            (
                "*" if row["selected"] else "",
                row["name"],
                row["support_level"],
                ", ".join(row["capabilities"]) or "-",
            )
            for row in rows
        ],
    )
    for row in rows:
        if row["settings"]:
            click.echo(f"\n{row['name']} settings:")
        for spec in row["settings"]:
            notes = [
                word
                for word, on in (
                    ("required", spec["required"]),
                    ("secret", spec["secret"]),
                    ("set", spec["set"]),
                )
                if on
            ]
            if spec["default"] is not None:
                notes.append(f"default {spec['default']}")
            suffix = f" ({', '.join(notes)})" if notes else ""
            click.echo(f"  {spec['env']}{suffix}: {spec['description']}")


# ---------------------------------------------------------------- exec


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


@cli.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
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
@click.option("--via-temporal/--direct", "via_temporal", default=None, help=_VIA_TEMPORAL_HELP)
@click.option(
    "--max-wait",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --via-temporal: how long to wait while the provider is unavailable (attempts "
    "fail and are retried) before giving up. Default: MANGO_TEMPORAL_MAX_WAIT, else 120.",
)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(  # noqa: PLR0917 - click passes every option as an argument
    session_id: str,
    timeout: float | None,
    cwd: str,
    env_pairs: tuple[str, ...],
    use_stdin: bool,
    via_temporal: bool | None,
    max_wait: float | None,
    argv: tuple[str, ...],
) -> None:
    """Run ARGV in the Session's sandbox and exit with its exit code.

    Output is written as it arrives (with --via-temporal: when the command has
    finished). Interrupting mango (Ctrl-C, SIGTERM) kills the command.

    \b
    Example:
      mango exec --session demo -- sh -c 'echo hello > note.txt'
      mango exec --session demo -- cat note.txt
    """
    session_id = _session(session_id)
    stdin = sys.stdin.buffer.read() if use_stdin else b""
    try:
        command = Command(argv, stdin=stdin, env=_parse_env(env_pairs), cwd=cwd, timeout=timeout)
    except MangoError as exc:
        raise click.BadParameter(str(exc)) from None

    if _via_temporal(via_temporal):
        from mango.cli.durable import exec_via_temporal

        settings = _settings()

        def report(line: str) -> None:
            click.echo(f"mango: {line}", err=True)

        sys.exit(
            _emit(
                _run(
                    lambda: exec_via_temporal(
                        settings, session_id, command, max_wait=max_wait, on_wait=report
                    )
                )
            )
        )

    async def run(rt: Runtime) -> int:
        await rt.manager.ensure_session(session_id)
        sandbox = await rt.manager.acquire(session_id, rt.default_spec())
        return _emit(await _stream(sandbox, command))

    sys.exit(_with_runtime(run))


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
    if result.timed_out:
        click.echo("mango: the command timed out and was terminated", err=True)
        return EXIT_TIMEOUT
    if result.cancelled:
        click.echo(
            "mango: the command was stopped: its Session's sandbox was deleted while it ran",
            err=True,
        )
        return EXIT_INTERRUPTED
    return result.exit_code if 0 <= result.exit_code <= 255 else 1


def _with_runtime(body: Callable[[Runtime], Awaitable[T]]) -> T:
    settings = _settings()

    async def go() -> T:
        from mango.runtime import open_runtime

        async with open_runtime(settings, linger=True) as rt:
            return await body(rt)

    return _run(go)


# ---------------------------------------------------------------- files


@cli.group()
def files() -> None:
    """Read and write files in a Session's workspace."""


@files.command(name="read")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of stdout.",
)
@click.argument("path")
def files_read(session_id: str, output: Path | None, path: str) -> None:
    """Print the file at PATH (workspace-relative).

    The file is streamed in chunks (Sandbox.open_file), so files of any size
    work without being held in memory.
    """
    session_id = _session(session_id)

    async def run(rt: Runtime) -> None:
        # Reading never provisions: a mistyped Session id must not create a sandbox.
        sandbox = await rt.manager.acquire_existing(session_id, rt.default_spec())
        if sandbox is None:
            raise InvalidInput(
                f"no session {session_id!r} with a sandbox to read from",
                hint="check the id with 'mango sessions list'",
            )
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(sandbox.open_file(path))
            except FileNotFoundError:
                raise InvalidInput(f"no file {path!r} in session {session_id!r}") from None
            target = sys.stdout.buffer if output is None else stack.enter_context(output.open("wb"))
            async for chunk in chunks:
                target.write(chunk)
            target.flush()

    _with_runtime(run)


@files.command(name="write")
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read content from this file instead of stdin.",
)
@click.argument("path")
def files_write(session_id: str, source: Path | None, path: str) -> None:
    """Write stdin (or --from FILE) to PATH (workspace-relative)."""
    session_id = _session(session_id)
    data = source.read_bytes() if source is not None else sys.stdin.buffer.read()

    async def run(rt: Runtime) -> None:
        await rt.manager.ensure_session(session_id)
        sandbox = await rt.manager.acquire(session_id, rt.default_spec())
        await sandbox.write_file(path, data)

    _with_runtime(run)


# ---------------------------------------------------------------- sessions


@cli.group()
def sessions() -> None:
    """List and delete Sessions."""


@sessions.command(name="list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_list(limit: int, as_json: bool) -> None:
    """List Sessions with their sandbox binding."""

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        from mango.domain.lifecycle import observe

        rows = []
        for record in await rt.store.list_sessions(limit):
            binding = await rt.store.get_binding(record.session_id)
            intent = None if binding else await rt.store.get_intent(record.session_id)
            state = observe(
                session_exists=True,
                fenced=record.deleting,
                has_intent=intent is not None,
                has_binding=binding is not None,
                binding_lost=binding is not None and binding.lost,
            ).value
            rows.append(
                {
                    "session_id": record.session_id,
                    "created_at": record.created_at.isoformat(),
                    "state": state,
                    "sandbox": str(binding.ref) if binding else None,
                }
            )
        return rows

    rows = _with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["session", "state", "sandbox", "created"],
        [(r["session_id"], r["state"], r["sandbox"] or "-", r["created_at"]) for r in rows],
    )


@sessions.command(name="delete")
@click.argument("session_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--force",
    is_flag=True,
    help="Remove what mango owns for the Session by the provider's own names even when its "
    "records are missing or damaged (a sandbox that deleted or replaced them); a resource "
    "the provider shows to be someone else's is left alone and only its binding dropped. "
    "Runs here, never through Temporal.",
)
@click.option("--via-temporal/--direct", "via_temporal", default=None, help=_VIA_TEMPORAL_HELP)
def sessions_delete(
    session_ids: tuple[str, ...], as_json: bool, force: bool, via_temporal: bool | None
) -> None:
    """Delete Sessions: fence, stop their commands, destroy the sandbox, remove the records."""
    ids = [_session(value) for value in session_ids]
    if force and via_temporal:
        raise click.UsageError("--force runs here, on the provider directly: drop --via-temporal")

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        return [
            {"session_id": sid, "deleted": await rt.manager.delete_session(sid, force=force)}
            for sid in ids
        ]

    if not force and _via_temporal(via_temporal):
        from mango.cli.durable import delete_via_temporal

        settings = _settings()
        deleted = _run(lambda: delete_via_temporal(settings, ids))
        rows = [{"session_id": sid, "deleted": d} for sid, d in zip(ids, deleted, strict=True)]
    else:
        rows = _with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        verb = "deleted" if row["deleted"] else "not found (nothing to delete)"
        click.echo(f"{row['session_id']}: {verb}")


# ---------------------------------------------------------------- reconcile


@cli.command()
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def reconcile(limit: int, as_json: bool) -> None:
    """Finish or destroy what a crash left behind (intents and deletions)."""

    async def run(rt: Runtime) -> dict[str, Any]:
        provisioning = await rt.manager.reconcile_provisioning(limit)
        deletions = await rt.manager.finish_deletions(limit)
        return {
            "provisioning": {
                "attempted": provisioning.attempted,
                "completed": provisioning.completed,
                "failures": [list(f) for f in provisioning.failures],
            },
            "deletions": {
                "attempted": deletions.attempted,
                "completed": deletions.completed,
                "failures": [list(f) for f in deletions.failures],
            },
        }

    report = _with_runtime(run)
    if as_json:
        echo_json(report)
    else:
        for part in ("provisioning", "deletions"):
            item = report[part]
            click.echo(f"{part}: {item['completed']} of {item['attempted']} completed")
            for sid, text in item["failures"]:
                click.echo(f"  {sid}: {text}")
    if report["provisioning"]["failures"] or report["deletions"]["failures"]:
        sys.exit(EXIT_ERROR)


# ---------------------------------------------------------------- doctor


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor(as_json: bool) -> None:
    """Check configuration and the reachability of every part; exit 2 if a check fails."""
    from mango.cli.doctor import run_doctor

    checks = _run(lambda: run_doctor(os.environ))
    if as_json:
        echo_json([c.as_dict() for c in checks])
    else:
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            click.echo(f"[{mark}] {check.name}: {check.detail}")
            if check.hint and not check.ok:
                click.echo(f"       hint: {check.hint}")
    if not all(check.ok for check in checks):
        sys.exit(EXIT_ERROR)


# ---------------------------------------------------------------- embedded


@cli.group()
def embedded() -> None:
    """The embedded PostgreSQL that commands share when MANGO_DATABASE_URL is unset.

    Commands leave it running for MANGO_EMBEDDED_IDLE_SECONDS (default 300)
    after their last use, so the next one starts quickly; a detached reaper
    stops it after that. 'mango worker' keeps it for as long as it runs.
    """


def _embedded_server() -> Any:
    settings = _settings()
    if settings.database_url is not None:
        _fail(
            "MANGO_DATABASE_URL is set, so no embedded PostgreSQL is used",
            "unset it to manage the embedded server under MANGO_STATE_DIR",
        )
    from mango.embedded.postgres import EmbeddedPostgres

    return EmbeddedPostgres(settings.state_dir / "postgres")


@embedded.command(name="status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def embedded_status(as_json: bool) -> None:
    """Show whether the embedded PostgreSQL runs, who uses it, and when it stops."""
    status = _embedded_server().status()
    if as_json:
        echo_json(status.as_dict())
        return
    if not status.running:
        click.echo(f"not running ({status.data_dir})")
        return
    use = "in use" if status.in_use else "idle"
    reaper = f"reaper pid {status.reaper_pid}" if status.reaper_pid else "no reaper"
    click.echo(
        f"running: pid {status.pid}, port {status.port}, {use}, {reaper} ({status.data_dir})"
    )


@embedded.command(name="stop")
def embedded_stop() -> None:
    """Stop the embedded PostgreSQL now (refused while a worker or a command uses it)."""
    server = _embedded_server()
    stopped = _run(lambda: asyncio.to_thread(server.shutdown))
    click.echo("stopped" if stopped else "not running")


cli.add_command(worker_command)
cli.add_command(store_command)


def main() -> None:
    """Entry point of the ``mango`` script.

    After a command that used Temporal the process ends with ``os._exit``
    once its output is flushed: the SDK's Rust threads can otherwise abort
    the interpreter's teardown (SIGABRT, "PyGILState_Release ... finalizing";
    temporalio/sdk-python#300), turning a finished command into exit -6.
    Everything the command opened is already closed by then.
    """
    try:
        cli(prog_name="mango")
    except SystemExit as exit_:
        code = exit_.code
    else:  # pragma: no cover - click's standalone mode always exits
        code = 0
    if "temporalio" not in sys.modules:
        raise SystemExit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)  # what SystemExit does with a message
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else 0)
