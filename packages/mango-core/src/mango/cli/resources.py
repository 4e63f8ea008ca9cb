"""``mango resources``: attach stored files to a Session, list them, remove them.

A resource is a stored file (``mango store put``) mounted read-only in the
Session's sandbox, by default at ``/mnt/session/uploads/<file id>``; it is
copied in before the next tool step (``mango exec``, a workflow step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import session_id_arg, with_runtime
from mango.cli.output import echo_json, echo_table

if TYPE_CHECKING:
    from mango.domain.resources import SessionResource
    from mango.runtime import Runtime

__all__ = ["resources"]


def _row(resource: SessionResource) -> dict[str, Any]:
    return {
        "id": resource.resource_id,
        "session_id": resource.session_id,
        "file_id": resource.file_id,
        "mount_path": resource.mount_path,
        "state": resource.state.value,
        "created_at": resource.created_at.isoformat(),
    }


@click.group(name="resources")
def resources() -> None:
    """A Session's File Resources: stored files mounted read-only in its sandbox.

    Needs a provider that declares file-resources (docker); others refuse at
    admission, listing every reason.
    """


@resources.command(name="add")
@click.option("--session", "session_id", required=True, help="Session id; created on first use.")
@click.option(
    "--path",
    "mount_path",
    help="Where it appears in the sandbox (default /mnt/session/uploads/FILE_ID); "
    "other paths are placed below /mnt/session/uploads.",
)
@click.argument("file_id")
def resources_add(session_id: str, mount_path: str | None, file_id: str) -> None:
    """Attach the stored file FILE_ID to the Session; print the resource's id.

    The file is copied into the sandbox before the Session's next tool step.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> SessionResource:
        return await rt.manager.add_file_resource(session_id, file_id, mount_path)

    added = with_runtime(run)
    click.echo(added.resource_id)


@resources.command(name="ls")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def resources_ls(session_id: str, as_json: bool) -> None:
    """List the Session's resources (being removed first, then oldest first)."""
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        return [_row(r) for r in await rt.files.list_resources(session_id)]

    rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "file", "path", "state"],
        [(r["id"], r["file_id"], r["mount_path"], r["state"]) for r in rows],
    )


@resources.command(name="rm")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.argument("resource_id")
def resources_rm(session_id: str, resource_id: str) -> None:
    """Remove RESOURCE_ID from the Session (and from its sandbox, if it has one).

    The stored file itself stays in the Files store.
    """
    session_id = session_id_arg(session_id)

    async def run(rt: Runtime) -> None:
        await rt.manager.remove_resource(session_id, resource_id, rt.default_spec())

    with_runtime(run)
