"""``mango store``: put files into the Files store, list, get and remove them.

Only click and light modules are imported here; the database driver and
the S3 client (``MANGO_FILE_STORE=s3`` only) load when a command runs.
Expected failures raise :class:`~mango.domain.errors.MangoError`, which the
root group prints as ``error:`` / ``hint:`` (exit 2).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mango.cli.common import EXIT_INTERRUPTED, STOP_SIGNALS
from mango.cli.output import echo_json, echo_table
from mango.cli.params import Seconds

if TYPE_CHECKING:
    from mango.app.files import StoredFiles
    from mango.domain.files import StoredFile

__all__ = ["store"]

T = TypeVar("T")


def _run(body: Callable[[StoredFiles], Awaitable[T]]) -> T:
    """Open the Files store (settings checked first), run ``body``, close it.

    SIGTERM and SIGHUP cancel the command like Ctrl-C does, so an upload in
    progress removes what it started before ``mango`` exits 143 (129).
    """
    from mango.config import Settings
    from mango.filestore import FileStoreSettings

    settings = Settings.from_env()
    file_settings = FileStoreSettings.from_env(state=settings.state_dir)
    stopped_by: list[signal.Signals] = []

    async def main() -> T:
        from mango.runtime import open_stored_files

        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - asyncio.run runs us in a task

        def on_signal(signum: signal.Signals) -> None:
            if not stopped_by:
                stopped_by.append(signum)
                task.cancel()

        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            async with open_stored_files(settings, file_settings, linger=True) as files:
                return await body(files)
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except asyncio.CancelledError:
        if stopped_by:
            message, code = STOP_SIGNALS[stopped_by[0]]
            click.echo(f"error: {message}", err=True)
            sys.exit(code)
        raise


def _row(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.file_id,
        "filename": stored.filename,
        "mime_type": stored.mime_type,
        "size": stored.size,
        "sha256": stored.sha256,
        "created_at": stored.created_at.isoformat(),
        "session_id": stored.session_id,
        "output_path": stored.output_path,
    }


@click.group(name="store")
def store() -> None:
    """The Files store: files kept by mango, by id (MANGO_FILE_STORE: fs or s3).

    A file is visible only once all of its bytes are stored and verified
    (size and SHA-256); every read checks them again.
    """


@store.command(name="put")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=True, allow_dash=False))
@click.option("--name", help="The stored file's name (default: FILE's base name).")
@click.option("--mime-type", help="Its MIME type (default: guessed from the name).")
def store_put(file: Path, name: str | None, mime_type: str | None) -> None:
    """Store FILE (streamed, verified) and print the new file's id."""
    stored = _run(lambda files: files.put_path(file, name=name, mime_type=mime_type))
    click.echo(stored.file_id)


@store.command(name="ls")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with the SHA-256 of each).")
def store_ls(limit: int, as_json: bool) -> None:
    """List the stored files, oldest first."""
    rows = [_row(stored) for stored in _run(lambda files: files.list_files(limit))]
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "size", "type", "created", "name"],
        [(r["id"], r["size"], r["mime_type"], r["created_at"], r["filename"]) for r in rows],
    )


@store.command(name="get")
@click.argument("file_id", metavar="ID")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write to this file, replacing it only once every byte checked out "
    "(default: stdout, where a damaged file is reported after its bytes).",
)
def store_get(file_id: str, output: Path | None) -> None:
    """Write the stored file ID to stdout or -o FILE, streamed and verified."""

    async def to_stdout(files: StoredFiles) -> None:
        target = sys.stdout.buffer
        async with files.open(file_id) as chunks:
            async for chunk in chunks:
                target.write(chunk)
        target.flush()

    if output is None:
        _run(to_stdout)
    else:
        _run(lambda files: files.download(file_id, output))


@store.command(name="rm")
@click.argument("file_ids", metavar="ID...", nargs=-1, required=True)
def store_rm(file_ids: tuple[str, ...]) -> None:
    """Remove stored files: invisible at once, then their bytes, then their records."""

    async def remove(files: StoredFiles) -> None:
        for file_id in file_ids:
            await files.delete(file_id)

    _run(remove)


@store.command(name="reconcile")
@click.option(
    "--stale-after",
    default=3600.0,
    show_default=True,
    type=Seconds(0, open_=False),
    metavar="SECONDS",
    help="Give up uploads not heard of for this long, and remove unrecorded blobs this old.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def store_reconcile(stale_after: float, as_json: bool) -> None:
    """Clean what crashes left: stalled uploads, unfinished deletions, unrecorded blobs."""
    report = _run(lambda files: files.reconcile(stale_after=timedelta(seconds=stale_after)))
    if as_json:
        echo_json(
            {
                "abandoned_uploads": report.abandoned_uploads,
                "removed_files": report.removed_files,
                "orphan_blobs": report.orphan_blobs,
                "incomplete_puts": report.incomplete_puts,
                "failures": [list(failure) for failure in report.failures],
            }
        )
    else:
        click.echo(
            f"abandoned uploads: {report.abandoned_uploads}, removed files: "
            f"{report.removed_files}, unrecorded blobs: {report.orphan_blobs}, "
            f"interrupted puts: {report.incomplete_puts}"
        )
        for what, text in report.failures:
            click.echo(f"  {what}: {text}")
    if report.failures:
        sys.exit(2)
