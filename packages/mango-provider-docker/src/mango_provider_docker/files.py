"""Workspace files through the Engine's archive API, with no shell in the container.

Paths follow the provider kit's :class:`~mango.provider.paths.PathPolicy`
(:data:`WORKSPACE_POLICY`: workspace-relative, no ``..``, no symlink anywhere;
:data:`MOUNTS_POLICY` for a container with the resource mounts: also
absolute paths below them, the uploads read-only, and ``skills/`` in the
workspace read-only too; :data:`PRE_SKILLS_POLICY` for a container made before
the skills mount).
Its stat callback here is ``HEAD /containers/{id}/archive``, which never
follows the last component, so ``/workspace`` itself, each parent and the
target are classified (concurrently) and a symlink anywhere along the path --
including one a command planted (``ln -s /etc leak``) -- is refused with
:class:`PathEscapeError` instead of being resolved.

* **read**: the target must be a regular file, and its size (from the same
  stat) at most the read bound (:class:`FileTooLarge` before any byte moves);
  ``GET .../archive`` streams a one-member tar that is parsed as it arrives
  (:class:`TarMemberReader`): the member type is checked again and its body
  read in chunks, stopping past the bound, so the archive is never held whole.
  ``open_file`` hands the same chunks on, for files of any size.
* **write**: ``PUT .../archive`` at the path's root with a tar holding a
  directory entry (0755) for each missing parent and the file (0644, owner
  root). Existing directories get no entry, so their modes are untouched;
  ``noOverwriteDirNonDir`` stops the daemon from replacing a directory.
* **streamed write**: the same archive, its file member a temporary name
  beside the target, sent as it is built. A tar member's header carries its
  size, so the chunks are first spooled to an unlinked temporary file on the
  worker host (disk, not memory: memory stays O(chunk)), then streamed from
  it; the sandbox then renames the temporary over the target in one ``mv -f
  -T`` (the kit's exec file API), so a write that fails midway never leaves a
  half file under the final name.

The daemon extracts and reads inside the container's root filesystem, so
nothing here can reach the host. A command racing a stat (swapping a checked
directory for a link before the transfer) can at most redirect the access to
another place inside the same container, which that command can write anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import tarfile
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import BinaryIO

from mango.provider import (
    OUTPUTS_ROOT,
    SKILLS_ROOT,
    UPLOADS_ROOT,
    Entry,
    EntryKind,
    ExtraRoot,
    PathEscapeError,
    PathPolicy,
    PermanentError,
    ProviderUnavailable,
    ResolvedPath,
    SandboxNotFound,
    StatCallback,
    file_not_found,
)
from mango.provider.reads import check_size, collect_bounded
from mango_provider_docker.engine import Engine
from mango_provider_docker.layout import WORKSPACE

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "MOUNTS_POLICY",
    "PRE_SKILLS_POLICY",
    "WORKSPACE_POLICY",
    "TarMemberReader",
    "container_stat",
    "open_workspace_file",
    "read_workspace_file",
    "spool_chunks",
    "upload_spooled",
    "write_workspace_file",
]

FILE_MODE = 0o644
DIRECTORY_MODE = 0o755

WORKSPACE_POLICY = PathPolicy(WORKSPACE)
"""Workspace-relative paths under ``/workspace``; no extra roots (the port is relative)."""
PRE_SKILLS_POLICY = PathPolicy(
    WORKSPACE,
    extra_roots=(ExtraRoot(UPLOADS_ROOT), ExtraRoot(OUTPUTS_ROOT, writable=True)),
    accept_absolute=True,
    absolute_roots_only=True,
)
"""With the uploads and outputs mounts: also absolute paths below ``/mnt/session/uploads``
(read only) and ``/mnt/session/outputs``, so tools and commands see one outputs directory."""
MOUNTS_POLICY = PathPolicy(
    WORKSPACE,
    extra_roots=(
        ExtraRoot(UPLOADS_ROOT),
        ExtraRoot(OUTPUTS_ROOT, writable=True),
        ExtraRoot(SKILLS_ROOT),
    ),
    accept_absolute=True,
    absolute_roots_only=True,
)
"""With every resource mount (containers made today): :data:`PRE_SKILLS_POLICY`, and the
read-only skills mount: a write below ``skills/`` is refused before the daemon is asked."""


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


_BLOCK = 512
_PAX_LIMIT = 1024 * 1024
"""Largest extended header accepted; real ones are a few hundred bytes."""
_EXTENDED = {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE}
_GNU_LONG = {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _pax_size(records: bytes) -> int | None:
    """The ``size`` record of a PAX extended header (``"%d size=%d\n"``), if any."""
    position = 0
    size: int | None = None
    while position < len(records):
        length_text, space, _ = records[position : position + 20].partition(b" ")
        if not space or not length_text.isdigit() or int(length_text) <= 0:
            raise tarfile.HeaderError("malformed extended header")
        record = records[position : position + int(length_text)]
        keyword, equals, value = record[len(length_text) + 1 :].partition(b"=")
        if not equals or not record.endswith(b"\n"):
            raise tarfile.HeaderError("malformed extended header record")
        if keyword == b"size":
            size = int(value[:-1])
        position += int(length_text)
    return size


class TarMemberReader:
    """The first member of a tar stream, parsed as the chunks arrive.

    :meth:`open_member` reads headers (PAX extended headers, GNU long names
    and the member's own; the size from a PAX record wins, base-256 sizes are
    understood) and :meth:`body` then yields the member's bytes in the chunks
    the stream delivers. Nothing past the member is read; memory is one chunk.
    """

    def __init__(self, chunks: AsyncIterator[bytes], path: str) -> None:
        self._chunks = chunks
        self._path = path
        self._pending = bytearray()

    def _malformed(self, reason: str) -> ProviderUnavailable:
        return ProviderUnavailable(
            f"the Docker Engine sent a malformed archive for {self._path!r}: {reason}"
        )

    async def _fill(self, size: int) -> None:
        while len(self._pending) < size:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise self._malformed("it ended early") from None
            self._pending += chunk

    async def _take(self, size: int) -> bytes:
        await self._fill(size)
        taken = bytes(self._pending[:size])
        del self._pending[:size]
        return taken

    async def _skip(self, size: int) -> None:
        while size:
            await self._fill(1)
            step = min(size, len(self._pending))
            del self._pending[:step]
            size -= step

    async def open_member(self) -> tuple[tarfile.TarInfo, int]:
        """Read up to the first real member's header; return it and its body size."""
        pax_size: int | None = None
        while True:
            block = await self._take(_BLOCK)
            if not block.strip(b"\0"):
                raise self._malformed("it holds no member")
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as exc:
                raise self._malformed(str(exc)) from exc
            if info.type in _EXTENDED or info.type in _GNU_LONG:
                if info.size > _PAX_LIMIT:
                    raise self._malformed("an extended header is too large")
                records = (await self._take(_padded(info.size)))[: info.size]
                if info.type == tarfile.XHDTYPE:
                    try:
                        pax_size = _pax_size(records)
                    except (tarfile.HeaderError, ValueError) as exc:
                        raise self._malformed(str(exc)) from exc
                continue
            return info, info.size if pax_size is None else pax_size

    async def body(self, size: int) -> AsyncGenerator[bytes, None]:
        """Yield the member's ``size`` bytes as they arrive."""
        remaining = size
        if self._pending and remaining:
            head = bytes(self._pending[:remaining])
            del self._pending[: len(head)]
            remaining -= len(head)
            yield head
        while remaining:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise self._malformed("it ended inside the file") from None
            if len(chunk) > remaining:
                chunk = chunk[:remaining]
            remaining -= len(chunk)
            yield chunk


def _check_member(info: tarfile.TarInfo, path: str) -> None:
    if info.issym() or info.islnk():
        raise PathEscapeError(f"path {path!r} is a link; links in the workspace are never followed")
    if not info.isreg():
        raise PermanentError(f"path {path!r} is not a regular file")


@contextlib.asynccontextmanager
async def _member_stream(
    engine: Engine,
    container_id: str,
    path: str,
    *,
    limit: int | None,
    policy: PathPolicy = WORKSPACE_POLICY,
) -> AsyncIterator[tuple[AsyncIterator[bytes], int]]:
    """The checked body of the regular file ``path``, streamed, and its size."""
    resolved = await policy.resolve_read(path, container_stat(engine, container_id))
    if limit is not None and resolved.entry is not None:
        check_size(path, resolved.entry.size, limit)  # before a byte of it moves
    async with engine.open_archive(container_id, resolved.path) as chunks:
        if chunks is None:
            raise file_not_found(path)
        reader = TarMemberReader(chunks, path)
        info, size = await reader.open_member()
        _check_member(info, path)
        if limit is not None:
            check_size(path, size, limit)  # the file grew after the stat
        body = reader.body(size)
        try:
            yield body, size
        finally:
            await body.aclose()


async def read_workspace_file(
    engine: Engine,
    container_id: str,
    path: str,
    limit: int,
    *,
    policy: PathPolicy = WORKSPACE_POLICY,
) -> bytes:
    """Return the bytes of the regular file ``path`` (workspace-relative), at most ``limit``.

    Raises :class:`FileTooLarge` past ``limit`` (checked from the stat before
    the transfer starts, and again from the archive header),
    :class:`FileNotFoundError` if it or a parent is missing,
    :class:`PathEscapeError` for escapes and symlinks, :class:`PermanentError`
    for directories and other non-regular files, and :class:`SandboxNotFound`
    if the container is gone.
    """
    async with _member_stream(engine, container_id, path, limit=limit, policy=policy) as (body, _):
        return await collect_bounded(body, limit, path=path)


@contextlib.asynccontextmanager
async def open_workspace_file(
    engine: Engine, container_id: str, path: str, *, policy: PathPolicy = WORKSPACE_POLICY
) -> AsyncIterator[AsyncIterator[bytes]]:
    """Stream the regular file ``path`` in chunks, whatever its size.

    The path is checked and the transfer opened on entry (the errors of
    :func:`read_workspace_file`, except :class:`FileTooLarge`); leaving the
    block closes the transfer.
    """
    async with _member_stream(engine, container_id, path, limit=None, policy=policy) as (body, _):
        yield body


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


async def write_workspace_file(
    engine: Engine,
    container_id: str,
    path: str,
    data: bytes,
    *,
    policy: PathPolicy = WORKSPACE_POLICY,
) -> None:
    """Create or replace the regular file ``path`` with ``data``, creating missing parents.

    Raises :class:`PathEscapeError` for escapes and symlinks (in a parent or
    the target), :class:`PermanentError` if the target is a directory or not a
    regular file or a parent is not a directory, and :class:`SandboxNotFound`
    if the container is gone.
    """
    resolved = await policy.resolve_write(path, container_stat(engine, container_id))
    anchor = resolved.anchor
    directories = [posixpath.relpath(directory, anchor) for directory in resolved.missing_dirs]
    payload = _archive(directories, posixpath.relpath(resolved.path, anchor), data)
    await engine.put_archive(container_id, anchor, payload)


SPOOL_CHUNK_BYTES = 1024 * 1024
"""Chunk of a spooled write read back for the archive (one thread hop each)."""


async def spool_chunks(chunks: AsyncIterable[bytes], spool: BinaryIO) -> int:
    """Write ``chunks`` to the host file ``spool`` (off the loop); return how many bytes."""
    size = 0
    async for chunk in chunks:
        await asyncio.to_thread(spool.write, chunk)
        size += len(chunk)
    await asyncio.to_thread(spool.flush)
    return size


def _header(name: str, *, size: int = 0, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.mtime = time.time()
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = DIRECTORY_MODE
    else:
        info.size = size
        info.mode = FILE_MODE
    return info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


async def _spooled_archive(
    directories: list[str], name: str, spool: BinaryIO, size: int
) -> AsyncIterator[bytes]:
    """A tar of ``directories`` and the member ``name`` with the spooled bytes, as it is built."""
    yield b"".join(_header(directory, directory=True) for directory in directories)
    yield _header(name, size=size)
    await asyncio.to_thread(spool.seek, 0)
    left = size
    while left > 0:
        chunk = await asyncio.to_thread(spool.read, min(SPOOL_CHUNK_BYTES, left))
        if not chunk:
            raise ProviderUnavailable(f"the spooled write of {name!r} ended early")
        left -= len(chunk)
        yield chunk
    # The member padded to a whole block, then the end-of-archive marker (two zero blocks).
    yield b"\0" * (_padded(size) - size) + b"\0" * (2 * tarfile.BLOCKSIZE)


async def upload_spooled(
    engine: Engine,
    container_id: str,
    resolved: ResolvedPath,
    *,
    temporary: str,
    spool: BinaryIO,
    size: int,
) -> None:
    """Extract the missing parents and ``temporary`` (a name beside the target) from ``spool``."""
    anchor = resolved.anchor
    directories = [posixpath.relpath(directory, anchor) for directory in resolved.missing_dirs]
    member = posixpath.join(posixpath.dirname(posixpath.relpath(resolved.path, anchor)), temporary)
    archive = _spooled_archive(directories, member, spool, size)
    await engine.put_archive_stream(container_id, anchor, archive)
