"""``mango sessions``: create Sessions with what they pin, list, pause, resume and delete them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import (
    VIA_TEMPORAL_HELP,
    load_settings,
    run_async,
    session_id_arg,
    use_temporal,
    with_runtime,
)
from mango.cli.output import echo_json, echo_table

if TYPE_CHECKING:
    from mango.runtime import Runtime

__all__ = ["sessions"]


@click.group()
def sessions() -> None:
    """Create, list, pause, resume and delete Sessions."""


@sessions.command(name="create")
@click.argument("session_id")
@click.option(
    "--skill",
    "skills",
    multiple=True,
    metavar="NAME@VERSION",
    help="Pin this skill version (repeatable); it appears read-only at "
    "/workspace/skills/NAME before each tool step. Needs a provider with skill-bundles.",
)
def sessions_create(session_id: str, skills: tuple[str, ...]) -> None:
    """Create the Session SESSION_ID with what it needs from the start.

    What 'mango exec' does implicitly for a new id (with nothing pinned).
    Again with the same options it succeeds (nothing changes); with others it
    fails: a Session's skills are fixed when it is created.

    \b
    Example:
      mango skills add ./my-skill
      mango sessions create demo --skill my-skill@1
      mango exec --session demo -- cat /workspace/skills/my-skill/SKILL.md
    """
    session_id = session_id_arg(session_id)
    # Each option is one keyword of SessionManager.create_session, so that a new kind of
    # attachment is one more option and one more entry here.
    needs: dict[str, Any] = {"skills": skills}

    async def run(rt: Runtime) -> Any:
        return await rt.manager.create_session(session_id, rt.default_spec(), **needs)

    created = with_runtime(run)
    verb = "created" if created.created else "exists already"
    pinned = ", ".join(str(version.ref) for version in created.skills) or "none"
    click.echo(f"{session_id}: {verb} (skills: {pinned})")


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
                binding_evicted=binding is not None and binding.evicted,
                binding_paused=binding is not None and binding.paused,
            ).value
            rows.append(
                {
                    "session_id": record.session_id,
                    "created_at": record.created_at.isoformat(),
                    "state": state,
                    "sandbox": str(binding.ref) if binding else None,
                    "paused_at": (
                        binding.paused_at.isoformat()
                        if binding is not None and binding.paused_at is not None
                        else None
                    ),
                }
            )
        return rows

    rows = with_runtime(run)
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
@click.option("--via-temporal/--direct", "via_temporal", default=None, help=VIA_TEMPORAL_HELP)
def sessions_delete(
    session_ids: tuple[str, ...], as_json: bool, force: bool, via_temporal: bool | None
) -> None:
    """Delete Sessions: fence, stop their commands, destroy the sandbox, remove the records."""
    ids = [session_id_arg(value) for value in session_ids]
    if force and via_temporal:
        raise click.UsageError("--force runs here, on the provider directly: drop --via-temporal")

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        return [
            {"session_id": sid, "deleted": await rt.manager.delete_session(sid, force=force)}
            for sid in ids
        ]

    if not force and use_temporal(via_temporal):
        from mango.cli.durable import delete_via_temporal

        settings = load_settings()
        deleted = run_async(lambda: delete_via_temporal(settings, ids))
        rows = [{"session_id": sid, "deleted": d} for sid, d in zip(ids, deleted, strict=True)]
    else:
        rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        verb = "deleted" if row["deleted"] else "not found (nothing to delete)"
        click.echo(f"{row['session_id']}: {verb}")


@sessions.command(name="pause")
@click.argument("session_id")
def sessions_pause(session_id: str) -> None:
    """Pause the Session's sandbox (its workspace and memory stay; it runs nothing).

    The next use (mango exec, a tool step, mango sessions resume) resumes it.
    Refused where the provider does not declare pause.
    """
    sid = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        await rt.manager.pause(sid)

    with_runtime(run)
    click.echo(f"{sid}: paused")


@sessions.command(name="resume")
@click.argument("session_id")
def sessions_resume(session_id: str) -> None:
    """Resume the Session's paused sandbox (nothing to do for a running one)."""
    sid = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        await rt.manager.resume(sid)

    with_runtime(run)
    click.echo(f"{sid}: running")
