"""``mango files``: read, write, list, remove, move files and make directories in a workspace.

``read`` and ``write`` work on every provider; ``ls``, ``rm``, ``mv`` and
``mkdir`` are the file API (capability ``file-api``) and fail with the
provider's ``CapabilityNotSupported`` where it is not declared. Only
``write`` and ``mkdir`` provision a sandbox; the others need one already.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from mango.cli.common import session_id_arg, with_runtime
from mango.cli.output import echo_json, echo_table
from mango.domain.errors import InvalidInput
from mango.domain.sandbox_ports import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT

if TYPE_CHECKING:
    from mango.app import SessionSandbox
    from mango.domain.sandbox_ports import FileInfo
    from mango.runtime import Runtime

__all__ = ["files"]


@click.group()
def files() -> None:
    """Read, write, list, remove and move files in a Session's workspace."""


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
    """Write stdin (or --from FILE) to PATH (workspace-relative).

    The content is streamed in chunks (Sandbox.write_stream), so files of any
    size work without being held in memory. The write is atomic: the bytes go
    to a temporary name beside PATH that replaces it only once all of them
    arrived, so an interrupted write leaves the old file as it was.

    As with cp, a PATH ending in '/' with --from FILE writes FILE's name into
    that directory ('--from report.txt notes.d/' writes notes.d/report.txt);
    from stdin there is no name to take, so such a PATH is refused.
    """
    session_id = session_id_arg(session_id)
    if path.endswith("/") and source is not None:
        path = path + source.name

    async def run(rt: Runtime) -> None:
        if path.endswith("/"):  # before anything is provisioned
            raise InvalidInput(
                f"path {path!r} ends in '/', so it names a directory, not a file",
                hint=f"give the file's name after it (for example '{path}NAME'), or pass "
                "--from FILE to write FILE's name into that directory",
            )
        await rt.manager.ensure_session(session_id)
        sandbox = await rt.manager.acquire(session_id, rt.default_spec())
        await rt.manager.materialize(session_id, rt.default_spec())
        with contextlib.ExitStack() as stack:
            stream = sys.stdin.buffer if source is None else stack.enter_context(source.open("rb"))
            await sandbox.write_stream(path, _chunks(stream))

    with_runtime(run)


WRITE_CHUNK_BYTES = 1024 * 1024
"""How much of stdin or --from FILE one chunk of a streamed write holds."""


async def _chunks(stream: BinaryIO) -> AsyncIterator[bytes]:
    """``stream``'s bytes in chunks of at most :data:`WRITE_CHUNK_BYTES`, read off the loop."""
    while chunk := await asyncio.to_thread(stream.read, WRITE_CHUNK_BYTES):
        yield chunk


async def _existing(rt: Runtime, session_id: str, what: str) -> SessionSandbox:
    """The Session's sandbox, never provisioned, its File Resources in place."""
    sandbox = await rt.manager.acquire_existing(session_id, rt.default_spec())
    if sandbox is None:
        raise InvalidInput(
            f"no session {session_id!r} with a sandbox to {what}",
            hint="check the id with 'mango sessions list'",
        )
    await rt.manager.materialize(session_id, rt.default_spec())
    return sandbox


def _missing(session_id: str, path: str) -> InvalidInput:
    return InvalidInput(
        f"no such path {path!r} in session {session_id!r} (or a parent of it is missing)",
        hint=f"list what is there with 'mango files ls --session {shlex.quote(session_id)}'",
    )


def _row(info: FileInfo) -> tuple[str, ...]:
    mode = "-" if info.mode is None else f"{info.mode:04o}"
    mtime = "-" if info.mtime is None else info.mtime.strftime("%Y-%m-%d %H:%M:%S")
    return (info.kind.value, str(info.size), mode, mtime, info.path)


def _json(info: FileInfo) -> dict[str, object]:
    return {
        "path": info.path,
        "name": info.name,
        "kind": info.kind.value,
        "size": info.size,
        "mode": info.mode,
        "mtime": None if info.mtime is None else info.mtime.isoformat(),
    }


@files.command(name="ls")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (entries and truncated).")
@click.option("-r", "--recursive", is_flag=True, help="Descend into sub-directories (never links).")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIST_LIMIT),
    default=DEFAULT_LIST_LIMIT,
    show_default=True,
    help="At most this many entries (the first in path order).",
)
@click.argument("path", default="")
def files_ls(session_id: str, as_json: bool, recursive: bool, limit: int, path: str) -> None:
    """List the directory PATH (workspace-relative; the root by default).

    Entries are sorted by path; links are shown as links, never followed. A
    listing that stops at --limit says so (on stderr, or "truncated" in JSON).
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        sandbox = await _existing(rt, session_id, "list")
        try:
            listing = await sandbox.list_dir(path, recursive=recursive, limit=limit)
        except FileNotFoundError:
            raise _missing(session_id, path) from None
        if as_json:
            echo_json(
                {
                    "entries": [_json(entry) for entry in listing.entries],
                    "truncated": listing.truncated,
                }
            )
            return
        echo_table(("kind", "size", "mode", "modified", "path"), [_row(e) for e in listing.entries])
        if listing.truncated:
            click.echo(
                f"mango: the listing stopped at {limit} "
                f"{'entry' if limit == 1 else 'entries'}; raise --limit to see more",
                err=True,
            )

    with_runtime(run)


@files.command(name="rm")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("-r", "--recursive", is_flag=True, help="Remove a directory and all below it.")
@click.argument("path")
def files_rm(session_id: str, recursive: bool, path: str) -> None:
    """Remove the file, link (not its target) or empty directory PATH.

    With --recursive, a directory and everything below it; links below it are
    removed, never followed. The workspace root cannot be removed.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        sandbox = await _existing(rt, session_id, "remove from")
        try:
            await sandbox.remove(path, recursive=recursive)
        except FileNotFoundError:
            raise _missing(session_id, path) from None

    with_runtime(run)


@files.command(name="mv")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.argument("source")
@click.argument("destination")
def files_mv(session_id: str, source: str, destination: str) -> None:
    """Move SOURCE to DESTINATION (both workspace-relative); DESTINATION must not exist."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        sandbox = await _existing(rt, session_id, "move in")
        try:
            await sandbox.rename(source, destination)
        except FileNotFoundError:
            raise InvalidInput(
                f"no such path {source!r}, or no parent directory for {destination!r}, "
                f"in session {session_id!r}",
                hint="make the parent first with "
                f"'mango files mkdir --session {shlex.quote(session_id)} DIR'",
            ) from None

    with_runtime(run)


@files.command(name="mkdir")
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option(
    "--no-parents",
    "no_parents",
    is_flag=True,
    help="The parent must exist and PATH must not (as mkdir without -p).",
)
@click.argument("path")
def files_mkdir(session_id: str, no_parents: bool, path: str) -> None:
    """Make the directory PATH, with its missing parents (unless --no-parents)."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        await rt.manager.ensure_session(session_id)
        sandbox = await rt.manager.acquire(session_id, rt.default_spec())
        await rt.manager.materialize(session_id, rt.default_spec())
        try:
            await sandbox.make_dir(path, parents=not no_parents)
        except FileNotFoundError:
            raise InvalidInput(
                f"the parent of {path!r} does not exist in session {session_id!r}",
                hint="drop --no-parents to make the parents too",
            ) from None

    with_runtime(run)
