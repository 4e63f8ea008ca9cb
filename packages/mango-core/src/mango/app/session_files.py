"""A Session's files: its File Resources and its published outputs, rows and bytes.

:class:`SessionFiles` is what SessionManager works through for the resource
steps of the lifecycle table: the resource rows (a
:class:`~mango.domain.resources.ResourceCatalog`), the output rows (an
:class:`~mango.domain.outputs.OutputCatalog`) and the Files store
(:class:`~mango.app.files.StoredFiles`). It checks every rule of a new
resource before anything changes and never talks to a provider: what
reaches a sandbox is the materializer's and the publisher's business
(:mod:`mango.app.materializer`, :mod:`mango.app.outputs`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence

import attrs

from mango.app.files import StoredFiles
from mango.domain.errors import InvalidInput, MangoError
from mango.domain.files import StoredFile, validate_file_id
from mango.domain.outputs import OutputCatalog, output_path
from mango.domain.resources import (
    NewResource,
    ResourceCatalog,
    SessionResource,
    new_resource_id,
    resolve_mount_path,
    validate_resource_id,
)
from mango.domain.values import validate_session_id

__all__ = ["SessionFiles"]


def _output_path(path: str) -> str:
    try:
        normal = output_path(path)
    except MangoError as exc:
        raise InvalidInput(str(exc)) from None
    if normal is None:
        raise InvalidInput(f"output path {path!r} names the outputs directory, not a file")
    return normal


@attrs.define
class SessionFiles:
    """Session resources and outputs on their catalogs and the Files store."""

    resources: ResourceCatalog
    outputs: OutputCatalog
    files: StoredFiles

    # ------------------------------------------------------------------ resources

    async def add_resource(
        self, session_id: str, file_id: str, mount_path: str | None = None
    ) -> SessionResource:
        """Attach the stored file ``file_id`` to the Session at ``mount_path``; the new row.

        The path defaults to ``/mnt/session/uploads/<file id>`` and is
        re-rooted below the uploads root (see
        :func:`~mango.domain.resources.resolve_mount_path`). Every rule is
        checked before anything changes: :class:`InvalidInput` for a bad id
        or path, a path overlapping another resource's, or a Session with
        500 resources already (or no Session);
        :class:`~mango.domain.errors.StoredFileNotFound` /
        :class:`~mango.domain.errors.StoredFileNotReady` for the file;
        :class:`~mango.domain.errors.SessionDeleting` for a fenced Session.
        The file reaches the sandbox at the next materialization (before
        the next tool step).
        """
        validate_session_id(session_id)
        validate_file_id(file_id)
        new = NewResource(
            resource_id=new_resource_id(),
            session_id=session_id,
            file_id=file_id,
            mount_path=resolve_mount_path(file_id, mount_path),
        )
        return await self.resources.add_resource(new)

    async def list_resources(self, session_id: str) -> Sequence[SessionResource]:
        """The Session's resources (those being removed first, then oldest first)."""
        return await self.resources.list_resources(validate_session_id(session_id))

    async def begin_remove(self, session_id: str, resource_id: str) -> SessionResource:
        """Mark the Session's resource ``deleting``; the next materialization removes it.

        :class:`InvalidInput` if the Session has no such resource.
        """
        validate_session_id(session_id)
        validate_resource_id(resource_id)
        row = await self.resources.begin_remove(session_id, resource_id)
        if row is None:
            raise InvalidInput(
                f"session {session_id!r} has no resource {resource_id!r}",
                hint=f"list them with 'mango resources ls --session {session_id}'",
            )
        return row

    # ------------------------------------------------------------------ outputs

    async def list_outputs(self, session_id: str) -> Sequence[StoredFile]:
        """The Session's published outputs (``ready`` stored files), by path."""
        return await self.outputs.list_outputs(validate_session_id(session_id))

    async def output(self, session_id: str, path: str) -> StoredFile:
        """The Session's published output at ``path`` (below the outputs directory).

        :class:`InvalidInput` if none is published there.
        """
        validate_session_id(session_id)
        found = await self.outputs.find_output(session_id, _output_path(path))
        if found is None:
            raise InvalidInput(
                f"session {session_id!r} has no published output {path!r}",
                hint=f"list them with 'mango outputs ls --session {session_id}', or publish "
                f"first with 'mango outputs publish --session {session_id}'",
            )
        return found

    @contextlib.asynccontextmanager
    async def open_output(self, session_id: str, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a published output, verified as :meth:`StoredFiles.open` verifies."""
        found = await self.output(session_id, path)
        async with self.files.open(found.file_id) as chunks:
            yield chunks

    async def download_output(
        self, session_id: str, path: str, destination: str | os.PathLike[str]
    ) -> StoredFile:
        """Write a published output to ``destination``, all or nothing (see ``download``)."""
        found = await self.output(session_id, path)
        return await self.files.download(found.file_id, destination)

    # ------------------------------------------------------------------ deletion

    async def remove_session_files(self, session_id: str) -> None:
        """Remove a fenced Session's resource rows and output files (blobs, then rows).

        Idempotent; the stored files the resources referred to stay (they
        are the store's, not the Session's).
        """
        await self.resources.drop_session_resources(session_id)
        for row in await self.outputs.drop_session_outputs(session_id):
            await self.files.blobs.delete(row.blob_key)
            await self.files.catalog.remove_file(row.file_id)
