"""Workspace files through the Engine's archive API, with no shell in the container.

Paths are validated by :func:`mango.domain.paths.split_workspace_path` (no
``..``, not absolute). Before any read or write, every prefix of the path is
stat-ed with ``HEAD /containers/{id}/archive`` (concurrently): ``/workspace``
itself, each parent, and the target. That stat never follows the last
component, so a symlink anywhere along the path -- including one a command
planted (``ln -s /etc leak``) -- is seen and refused with
:class:`PathEscapeError` instead of being resolved.

* **read**: the target must be a regular file; ``GET .../archive`` returns a
  one-member tar whose member type is checked again.
* **write**: ``PUT .../archive?path=/workspace`` with a tar holding a
  directory entry (0755) for each missing parent and the file (0644, owner
  root). Existing directories get no entry, so their modes are untouched;
  ``noOverwriteDirNonDir`` stops the daemon from replacing a directory.

The daemon extracts and reads inside the container's root filesystem, so
nothing here can reach the host. A command racing a stat (swapping a checked
directory for a link before the transfer) can at most redirect the access to
another place inside the same container, which that command can write anyway.
"""

from __future__ import annotations

import asyncio
import errno
import io
import posixpath
import tarfile
import time

from mango.domain.errors import (
    PathEscapeError,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.domain.paths import split_workspace_path
from mango_provider_docker.engine import Engine, PathStat
from mango_provider_docker.layout import WORKSPACE

__all__ = ["DIRECTORY_MODE", "FILE_MODE", "read_workspace_file", "write_workspace_file"]

FILE_MODE = 0o644
DIRECTORY_MODE = 0o755


def _prefixes(parts: tuple[str, ...]) -> list[str]:
    return [WORKSPACE] + [
        posixpath.join(WORKSPACE, *parts[: index + 1]) for index in range(len(parts))
    ]


async def _stat_chain(
    engine: Engine, container_id: str, parts: tuple[str, ...]
) -> list[PathStat | None]:
    """Stat ``/workspace`` and every prefix of ``parts``, in order, checking the root.

    The stats run concurrently. A prefix below a non-directory makes the
    daemon fail (ENOTDIR), so a failure counts only once every component
    before it has been checked: the returned list stops at the first failing
    prefix, and the caller's checks of the earlier components decide.
    """
    results = await asyncio.gather(
        *(engine.stat_path(container_id, prefix) for prefix in _prefixes(parts)),
        return_exceptions=True,
    )
    root = results[0]
    if isinstance(root, BaseException):
        raise root
    if root is None:
        if await engine.inspect_container(container_id) is None:
            raise SandboxNotFound(f"container {container_id} no longer exists")
        raise PermanentError(f"the container's {WORKSPACE} is missing")
    if root.is_symlink or not root.is_dir:
        raise PathEscapeError(f"the container's {WORKSPACE} was replaced by a symlink or a file")
    stats: list[PathStat | None] = []
    for index, result in enumerate(results[1:]):
        if isinstance(result, BaseException):
            if index == 0 or _is_plain_dir(stats[index - 1]):
                raise result
            break
        stats.append(result)
    return stats


def _is_plain_dir(stat: PathStat | None) -> bool:
    return stat is not None and stat.is_dir and not stat.is_symlink


def _check_parent(stat: PathStat, path: str, name: str) -> None:
    if stat.is_symlink:
        raise PathEscapeError(
            f"path {path!r} goes through the symlink {name!r}; "
            "symlinks in the workspace are never followed"
        )
    if not stat.is_dir:
        raise PermanentError(f"path {path!r}: component {name!r} is not a directory")


def _check_target(stat: PathStat, path: str) -> None:
    if stat.is_symlink:
        raise PathEscapeError(
            f"path {path!r} is a symlink; symlinks in the workspace are never followed"
        )
    if stat.is_dir:
        raise PermanentError(f"path {path!r} is a directory, not a regular file")
    if not stat.is_regular:
        raise PermanentError(f"path {path!r} is not a regular file")


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such file in the workspace", path)


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
    parts = split_workspace_path(path)
    stats = await _stat_chain(engine, container_id, parts)
    for name, stat in zip(parts[:-1], stats, strict=False):
        if stat is None:
            raise _missing(path)
        _check_parent(stat, path, name)
    target = stats[-1]
    if target is None:
        raise _missing(path)
    _check_target(target, path)
    body = await engine.get_archive(container_id, posixpath.join(WORKSPACE, *parts))
    if body is None:
        raise _missing(path)
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
    parts = split_workspace_path(path)
    stats = await _stat_chain(engine, container_id, parts)
    missing_from = len(parts) - 1
    for index, (name, stat) in enumerate(zip(parts[:-1], stats, strict=False)):
        if stat is None:
            missing_from = index
            break
        _check_parent(stat, path, name)
    else:
        target = stats[-1]
        if target is not None:
            _check_target(target, path)
    directories = ["/".join(parts[: index + 1]) for index in range(missing_from, len(parts) - 1)]
    payload = _archive(directories, "/".join(parts), data)
    await engine.put_archive(container_id, WORKSPACE, payload)
