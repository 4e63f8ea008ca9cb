"""``mango gc``: the orphan sweep of the selected provider (:mod:`mango.app.sweep`).

It lists every resource the provider holds under this deployment's
namespace that no Session record claims, with its age. It reports only,
unless ``--yes``: then each orphan older than ``--older-than`` is removed
through the provider's ownership-checked teardown.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import EXIT_ERROR, with_runtime
from mango.cli.output import echo_json, echo_table
from mango.domain.durations import format_duration, parse_duration
from mango.domain.errors import InvalidInput

if TYPE_CHECKING:
    from mango.app.sweep import SweepReport
    from mango.runtime import Runtime

__all__ = ["gc", "report_document"]


def _duration(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    try:
        return parse_duration(value, what="--older-than")
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def report_document(report: SweepReport) -> dict[str, Any]:
    """The report as JSON values (what ``--json`` prints)."""
    return {
        "provider": report.provider,
        "older_than_seconds": report.older_than,
        "destroy": report.destroy,
        "listed": report.listed,
        "claimed": report.claimed,
        "orphans": len(report.orphans),
        "destroyed": report.destroyed,
        "stopped": report.stopped,
        "ok": report.ok,
        "resources": [
            {
                "ref": str(item.ref),
                "session_hash": item.session_hash,
                "age_seconds": item.age,
                "verdict": item.verdict.value,
                "outcome": None if item.outcome is None else item.outcome.value,
                "detail": item.detail,
            }
            for item in report.items
        ],
    }


def _echo_text(report: SweepReport) -> None:
    click.echo(
        f"provider {report.provider}: {report.listed} resource(s) in this namespace, "
        f"{report.claimed} claimed by Sessions, {len(report.items)} unclaimed"
    )
    if report.items:
        rows = [
            (
                str(item.ref),
                item.session_hash,
                "?" if item.age is None else format_duration(item.age),
                item.verdict.value,
                "" if item.outcome is None else item.outcome.value,
                item.detail,
            )
            for item in report.items
        ]
        echo_table(("ref", "session hash", "age", "verdict", "outcome", "detail"), rows)
    older = format_duration(report.older_than)
    if report.destroy:
        click.echo(f"destroyed {report.destroyed} of {len(report.orphans)} orphan(s)")
    elif report.orphans:
        click.echo(
            f"{len(report.orphans)} orphan(s) older than {older}; "
            "run 'mango gc --yes' to destroy them"
        )
    if report.stopped is not None:
        click.echo(f"stopped early: {report.stopped}", err=True)


@click.command()
@click.option("--yes", is_flag=True, help="Destroy the orphans (default: only report them).")
@click.option(
    "--older-than",
    "older_than",
    default="1h",
    show_default=True,
    callback=_duration,
    help="Only resources at least this old are orphans (90s, 30m, 2h, 7d); younger ones are "
    "kept, so a create in flight is never swept.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gc(yes: bool, older_than: float, as_json: bool) -> None:
    """Find (and with --yes destroy) sandboxes this deployment owns that no Session claims."""

    async def run(rt: Runtime) -> SweepReport:
        from mango.app.sweep import sweep_orphans
        from mango.postgres import PostgresSessionClaims

        provider = rt.provider if rt.provider is not None else rt.manager.provider
        claims = PostgresSessionClaims(rt.store.pool)
        return await sweep_orphans(provider, claims, older_than=older_than, destroy=yes)

    report = with_runtime(run)
    if as_json:
        echo_json(report_document(report))
    else:
        _echo_text(report)
    if not report.ok:
        sys.exit(EXIT_ERROR)
