"""``mango embedded``: the embedded PostgreSQL that commands share."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from mango.cli.common import fail, load_settings, run_async
from mango.cli.output import echo_json

__all__ = ["embedded"]


@click.group()
def embedded() -> None:
    """The embedded PostgreSQL that commands share when MANGO_DATABASE_URL is unset.

    Commands leave it running for MANGO_EMBEDDED_IDLE_SECONDS (default 300)
    after their last use, so the next one starts quickly; a detached reaper
    stops it after that. 'mango worker' keeps it for as long as it runs.
    """


def _embedded_server() -> Any:
    settings = load_settings()
    if settings.database_url is not None:
        fail(
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
    stopped = run_async(lambda: asyncio.to_thread(server.shutdown))
    click.echo("stopped" if stopped else "not running")
