"""The File Resource materializer: a sandbox brought in line with its Session's rows.

It runs before every tool step (the lifecycle table's ``materialize``), so it
does only what changed: for each of the Session's resources, in the order
the catalog gives them (removals first):

* a ``deleting`` row: the copy is removed from the sandbox (only if its
  marker still names this resource: a newer one may have reused the path),
  then the row;
* an ``active`` row whose copy is present and verified by the provider is
  skipped; otherwise the stored file is streamed into the sandbox (its size
  checked by the Files store as it is read, size and SHA-256 by the
  provider as it is written, against the same row: hashed once). If the row
  changed meanwhile (removed, or moved), the fresh copy is removed again and
  the step fails retryably.

A sandbox that cannot hold File Resources while the Session has some is
:class:`~mango.domain.errors.CapabilityNotSupported` (permanent).
"""

from __future__ import annotations

import attrs

from mango.app.session_files import SessionFiles
from mango.domain.errors import CapabilityNotSupported, PreconditionFailed
from mango.domain.ports import FileResourceSandbox, Sandbox
from mango.domain.resources import FileResourceMount, SessionResource

__all__ = ["MaterializeReport", "finish_removals", "materialize"]


@attrs.frozen
class MaterializeReport:
    """What one materialization did."""

    imported: int = 0
    present: int = 0
    """Active resources whose copy was already there and verified (skipped)."""
    removed: int = 0


def _capable(sandbox: Sandbox, session_id: str, provider: str) -> FileResourceSandbox:
    if not isinstance(sandbox, FileResourceSandbox):
        raise CapabilityNotSupported(
            provider,
            [f"{provider} does not support file resource mounts, which session {session_id!r} has"],
            hint="remove the Session's resources, or use a provider that declares file-resources",
        )
    return sandbox


async def finish_removals(files: SessionFiles, session_id: str) -> MaterializeReport:
    """With no sandbox to hold them, finish the Session's removals in the rows alone."""
    removed = 0
    for row in await files.resources.list_resources(session_id):
        if not row.active:
            removed += await files.resources.finish_remove(row.resource_id)
    return MaterializeReport(removed=removed)


async def materialize(
    files: SessionFiles, session_id: str, sandbox: Sandbox, provider: str
) -> MaterializeReport:
    """Bring ``sandbox``'s File Resources in line with the Session's rows (see the module)."""
    rows = await files.resources.list_resources(session_id)
    if not rows:
        return MaterializeReport()
    target = _capable(sandbox, session_id, provider)
    imported = present = removed = 0
    for row in rows:
        if not row.active:
            await target.remove_file_resource(row.mount_path, row.resource_id)
            removed += await files.resources.finish_remove(row.resource_id)
        elif await _import(files, target, row):
            imported += 1
        else:
            present += 1
    return MaterializeReport(imported=imported, present=present, removed=removed)


async def _import(files: SessionFiles, sandbox: FileResourceSandbox, row: SessionResource) -> bool:
    """Import ``row``'s file unless its copy is there; True if it was imported."""
    stored = await files.files.get(row.file_id)
    if stored.size is None or stored.sha256 is None:  # pragma: no cover - ready rows have both
        raise PreconditionFailed(f"stored file {row.file_id!r} has no verified size yet")
    mount = FileResourceMount(row.resource_id, row.mount_path, stored.size, stored.sha256)
    if await sandbox.has_file_resource(mount):
        return False
    # The import checks size and SHA-256 against the same row: the bytes are hashed once.
    async with files.files.open(row.file_id, hash_check=False) as chunks:
        await sandbox.import_file_resource(mount, chunks)
    current = await files.resources.get_resource(row.resource_id)
    if current is None or not current.active or current.mount_path != row.mount_path:
        # Removed (or finished by an overlapping pass) while it was copied.
        await sandbox.remove_file_resource(row.mount_path, row.resource_id)
        raise PreconditionFailed(
            f"resource {row.resource_id} of session {row.session_id!r} changed while it was "
            "materialized; the copy was removed again",
            hint="retry the step",
        )
    return True
