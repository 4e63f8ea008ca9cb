"""``mango reconcile``: finish or destroy what a crash left behind."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import EXIT_ERROR, with_runtime
from mango.cli.output import echo_json

if TYPE_CHECKING:
    from mango.runtime import Runtime

__all__ = ["reconcile"]


@click.command()
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--stale-after",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up file uploads (outputs included) not heard of for this long.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def reconcile(limit: int, stale_after: float, as_json: bool) -> None:
    """Finish or destroy what a crash left behind (intents, deletions, files)."""

    async def run(rt: Runtime) -> dict[str, Any]:
        provisioning = await rt.manager.reconcile_provisioning(limit)
        deletions = await rt.manager.finish_deletions(limit)
        stored = await rt.files.files.reconcile(stale_after=timedelta(seconds=stale_after))
        return {
            "files": {
                "abandoned_uploads": stored.abandoned_uploads,
                "removed_files": stored.removed_files,
                "orphan_blobs": stored.orphan_blobs,
                "incomplete_puts": stored.incomplete_puts,
                "failures": [list(f) for f in stored.failures],
            },
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

    report = with_runtime(run)
    if as_json:
        echo_json(report)
    else:
        for part in ("provisioning", "deletions"):
            item = report[part]
            click.echo(f"{part}: {item['completed']} of {item['attempted']} completed")
            for sid, text in item["failures"]:
                click.echo(f"  {sid}: {text}")
        files = report["files"]
        click.echo(
            f"files: {files['abandoned_uploads']} abandoned upload(s), {files['removed_files']} "
            f"removed, {files['orphan_blobs']} unrecorded blob(s), "
            f"{files['incomplete_puts']} interrupted put(s)"
        )
        for what, text in files["failures"]:
            click.echo(f"  {what}: {text}")
    if any(report[part]["failures"] for part in ("provisioning", "deletions", "files")):
        sys.exit(EXIT_ERROR)
