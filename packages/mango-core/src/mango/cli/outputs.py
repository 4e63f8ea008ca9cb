"""``mango outputs``: publish a Session's outputs directory, list and download its outputs.

Commands and tools in a sandbox write below ``/mnt/session/outputs``;
publishing stores every file there as one of the Session's outputs (only
what changed is uploaded; a file that is gone loses its output).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import session_id_arg, with_runtime
from mango.cli.output import echo_json, echo_table

if TYPE_CHECKING:
    from mango.app.outputs import PublishReport
    from mango.domain.files import StoredFile
    from mango.runtime import Runtime

__all__ = ["outputs"]


def _row(stored: StoredFile) -> dict[str, Any]:
    return {
        "path": stored.output_path,
        "size": stored.size,
        "sha256": stored.sha256,
        "file_id": stored.file_id,
        "mime_type": stored.mime_type,
        "updated_at": stored.updated_at.isoformat(),
    }


@click.group(name="outputs")
def outputs() -> None:
    """A Session's outputs: the files its sandbox left in /mnt/session/outputs.

    Needs a provider that declares session-outputs (docker); others refuse at
    admission, listing every reason.
    """


@outputs.command(name="publish")
@click.option("--session", "session_id", required=True, help="Session id.")
def outputs_publish(session_id: str) -> None:
    """Publish the sandbox's /mnt/session/outputs as the Session's outputs.

    A symlink, hardlink, device or FIFO, a name that is not clean UTF-8, more
    than 500 files or a file over 500 MiB fail the whole publication, naming
    the file. Never creates a sandbox.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> PublishReport | None:
        return await rt.manager.publish_outputs(session_id, rt.default_spec())

    report = with_runtime(run)
    if report is None:
        click.echo(f"session {session_id!r} has no sandbox: nothing to publish")
        return
    click.echo(
        f"{report.files} file(s): {report.published} published, {report.unchanged} unchanged, "
        f"{report.removed} removed"
    )


@outputs.command(name="ls")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def outputs_ls(session_id: str, as_json: bool) -> None:
    """List the Session's published outputs: path, size, SHA-256, file id."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        return [_row(stored) for stored in await rt.files.list_outputs(session_id)]

    rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["path", "size", "sha256", "file"],
        [(r["path"], r["size"], r["sha256"], r["file_id"]) for r in rows],
    )


@outputs.command(name="get")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write to this file, replacing it only once every byte checked out (default: stdout).",
)
@click.argument("path")
def outputs_get(session_id: str, output: Path | None, path: str) -> None:
    """Write the Session's published output PATH (below /mnt/session/outputs) out, verified."""
    session_id = session_id_arg(session_id)

    async def to_stdout(rt: Runtime) -> None:
        target = sys.stdout.buffer
        async with rt.files.open_output(session_id, path) as chunks:
            async for chunk in chunks:
                target.write(chunk)
        target.flush()

    async def to_file(rt: Runtime) -> None:
        await rt.files.download_output(session_id, path, output or Path())

    with_runtime(to_stdout if output is None else to_file)
