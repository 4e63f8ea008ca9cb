"""Workspace files through the Engine's archive API, with no shell in the container.

Paths follow the provider kit's :class:`~mango.provider.paths.PathPolicy`
(:data:`WORKSPACE_POLICY`: workspace-relative, no ``..``, no symlink anywhere).
Its stat callback here is ``HEAD /containers/{id}/archive``, which never
follows the last component, so ``/workspace`` itself, each parent and the
target are classified (concurrently) and a symlink anywhere along the path --
including one a command planted (``ln -s /etc leak``) -- is refused with
:class:`PathEscapeError` instead of being resolved.

* **read**: the target must be a regular file; ``GET .../archive`` returns a
  one-member tar whose member type is checked again.
* **write**: ``PUT .../archive`` at the path's root with a tar holding a
  directory entry (0755) for each missing parent and the file (0644, owner
  root). Existing directories get no entry, so their modes are untouched;
  ``noOverwriteDirNonDir`` stops the daemon from replacing a directory.

The daemon extracts and reads inside the container's root filesystem, so
nothing here can reach the host. A command racing a stat (swapping a checked
directory for a link before the transfer) can at most redirect the access to
another place inside the same container, which that command can write anyway.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time

from mango.provider import (
    Entry,
    EntryKind,
    PathEscapeError,
    PathPolicy,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
    StatCallback,
    file_not_found,
)
from mango_provider_docker.engine import Engine
from mango_provider_docker.layout import WORKSPACE

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "WORKSPACE_POLICY",
    "container_stat",
    "read_workspace_file",
    "write_workspace_file",
]

FILE_MODE = 0o644
DIRECTORY_MODE = 0o755

WORKSPACE_POLICY = PathPolicy(WORKSPACE)
"""Workspace-relative paths under ``/workspace``; no extra roots (the port is relative)."""


def container_stat(engine: Engine, container_id: str) -> StatCallback:
    """The policy's stat callback for one container: its archive stat, as an :class:`Entry`.

    A HEAD answer cannot tell a missing path from a missing container, so a
    missing ``/workspace`` is told apart by inspecting the container
    (:class:`SandboxNotFound` if it is gone).
    """

    async def stat(path: str) -> Entry | None:
        found = await engine.stat_path(container_id, path)
        if found is None:
            if path == WORKSPACE and await engine.inspect_container(container_id) is None:
                raise SandboxNotFound(f"container {container_id} no longer exists")
            return None
        if found.is_symlink:
            kind = EntryKind.SYMLINK
        elif found.is_dir:
            kind = EntryKind.DIRECTORY
        elif found.is_regular:
            kind = EntryKind.REGULAR
        else:
            kind = EntryKind.OTHER
        return Entry(kind, found.size)

    return stat


def _single_member(body: bytes, path: str) -> bytes:
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as archive:
            member = archive.next()
            if member is None:
                raise ProviderUnavailable(f"the Docker Engine sent an empty archive for {path!r}")
            if member.issym() or member.islnk():
                raise PathEscapeError(
                    f"path {path!r} is a link; links in the workspace are never followed"
                )
            if not member.isreg():
                raise PermanentError(f"path {path!r} is not a regular file")
            handle = archive.extractfile(member)
            if handle is None:
                raise PermanentError(f"path {path!r} is not a regular file")
            return handle.read()
    except tarfile.TarError as exc:
        raise ProviderUnavailable(
            f"the Docker Engine sent a malformed archive for {path!r}"
        ) from exc


async def read_workspace_file(engine: Engine, container_id: str, path: str) -> bytes:
    """Return the bytes of the regular file ``path`` (workspace-relative).

    Raises :class:`FileNotFoundError` if it or a parent is missing,
    :class:`PathEscapeError` for escapes and symlinks, :class:`PermanentError`
    for directories and other non-regular files, and :class:`SandboxNotFound`
    if the container is gone.
    """
    resolved = await WORKSPACE_POLICY.resolve_read(path, container_stat(engine, container_id))
    body = await engine.get_archive(container_id, resolved.path)
    if body is None:
        raise file_not_found(path)
    return _single_member(body, path)


def _archive(directories: list[str], name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = DIRECTORY_MODE
            info.mtime = now
            archive.addfile(info)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = FILE_MODE
        info.mtime = now
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def write_workspace_file(engine: Engine, container_id: str, path: str, data: bytes) -> None:
    """Create or replace the regular file ``path`` with ``data``, creating missing parents.

    Raises :class:`PathEscapeError` for escapes and symlinks (in a parent or
    the target), :class:`PermanentError` if the target is a directory or not a
    regular file or a parent is not a directory, and :class:`SandboxNotFound`
    if the container is gone.
    """
    resolved = await WORKSPACE_POLICY.resolve_write(path, container_stat(engine, container_id))
    anchor = resolved.anchor
    directories = [posixpath.relpath(directory, anchor) for directory in resolved.missing_dirs]
    payload = _archive(directories, posixpath.relpath(resolved.path, anchor), data)
    await engine.put_archive(container_id, anchor, payload)
