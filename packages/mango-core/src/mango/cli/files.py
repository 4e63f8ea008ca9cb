"""``mango files``: read and write files in a Session's workspace."""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mango.cli.common import session_id_arg, with_runtime
from mango.domain.errors import InvalidInput

if TYPE_CHECKING:
    from mango.runtime import Runtime

__all__ = ["files"]


@click.group()
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
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        # Reading never provisions: a mistyped Session id must not create a sandbox.
        sandbox = await rt.manager.acquire_existing(session_id, rt.default_spec())
        if sandbox is None:
            raise InvalidInput(
                f"no session {session_id!r} with a sandbox to read from",
                hint="check the id with 'mango sessions list'",
            )
        # A file operation is a tool step: the Session's File Resources are in place first.
        await rt.manager.materialize(session_id, rt.default_spec())
        async with contextlib.AsyncExitStack() as stack:
            try:
                chunks = await stack.enter_async_context(sandbox.open_file(path))
            except FileNotFoundError:
                raise InvalidInput(
                    f"no file {path!r} in session {session_id!r}",
                    hint="see what the workspace holds with "
                    f"'mango exec --session {shlex.quote(session_id)} -- ls -la'",
                ) from None
            target = sys.stdout.buffer if output is None else stack.enter_context(output.open("wb"))
            async for chunk in chunks:
                target.write(chunk)
            target.flush()

    with_runtime(run)


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
    session_id = session_id_arg(session_id)
    data = source.read_bytes() if source is not None else sys.stdin.buffer.read()

    async def run(rt: Runtime) -> None:
        await rt.manager.ensure_session(session_id)
        sandbox = await rt.manager.acquire(session_id, rt.default_spec())
        await rt.manager.materialize(session_id, rt.default_spec())
        await sandbox.write_file(path, data)

    with_runtime(run)
