"""``mango reconcile``: finish or destroy what a crash left behind."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import EXIT_ERROR, with_runtime
from mango.cli.output import echo_json

if TYPE_CHECKING:
    from mango.runtime import Runtime

__all__ = ["reconcile"]


@click.command()
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

    report = with_runtime(run)
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
