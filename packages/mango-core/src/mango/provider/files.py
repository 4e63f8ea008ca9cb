"""A sandbox's files over a remote file API: bounded reads, streamed reads, writes.

Every file API a sandbox daemon offers comes down to the same four calls: a
stat that does not follow the last component, a streamed download, a
``mkdir -p`` and an upload. :class:`RemoteFiles` is the mixin that builds the
port's three file methods from them, the same way for every provider:

* ``read_file(path, *, max_bytes=None)``: the bound (:func:`~mango.provider.reads.read_limit`),
  the path policy over the stat (every component classified, links refused),
  the stat's size checked before a byte moves, the size the transfer itself
  announces checked again (a file that grew), then the chunks joined up to the
  bound (:func:`~mango.provider.reads.collect_bounded`): memory O(bound);
* ``open_file(path)``: the same checks without the bound, then the download's
  chunks as they arrive: memory O(chunk), whatever the size;
* ``write_file(path, data)``: ``data`` must be bytes (:class:`InvalidInput`
  otherwise, before anything is sent: no provider ever writes ``bytes(5)``
  for a ``5``), the policy's write resolution, the missing parents made, then
  the upload (which creates or truncates);
* ``write_stream(path, chunks)``: the same checks as ``write_file``, then the
  chunks uploaded as they come (memory O(chunk)) to a temporary sibling
  (:func:`staging_name`), which then replaces ``path``; a failure midway (the
  source raises, the transfer breaks, cancellation) discards the temporary,
  so the old file stays and no half file ever has the final name;
* ``_ensure_directory(path)``: a command's working directory made as the
  local and Docker providers make it (missing components created, a symlink
  anywhere refused), for a provider whose exec API cannot do it itself.

A call of the API that fails with a retryable :class:`MangoError` goes
through the sandbox's ``_lost`` hook, which a remote sandbox points at its
provider view's :meth:`~mango.provider.remote.ProviderView.lost`: a vanished
sandbox is then :class:`SandboxNotFound`, never a missing file or a transient
error.

:func:`file_bytes` is the write's type check on its own, for a provider whose
write is not a mkdir-and-upload (Docker's is one archive); :func:`chunk_bytes`
the same for each chunk of a streamed write.

Stdlib and attrs only.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import secrets
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import NoReturn

import attrs

from mango.domain.errors import InvalidInput, MangoError
from mango.provider.execution import checkpoint
from mango.provider.paths import Entry, Location, PathPolicy, ResolvedPath, StatCallback
from mango.provider.reads import check_size, collect_bounded, read_limit

__all__ = ["Download", "RemoteFiles", "checked_chunks", "chunk_bytes", "file_bytes", "staging_name"]


def file_bytes(data: object) -> bytes:
    """``data`` as bytes if it is bytes, a bytearray or a memoryview; else :class:`InvalidInput`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInput(f"write_file() takes bytes, got {type(data).__name__}")
    return bytes(data)


def chunk_bytes(chunk: object) -> bytes:
    """One chunk of a streamed write as bytes; anything else is :class:`InvalidInput`."""
    if not isinstance(chunk, bytes | bytearray | memoryview):
        raise InvalidInput(f"write_stream() takes chunks of bytes, got {type(chunk).__name__}")
    return bytes(chunk)


async def checked_chunks(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The non-empty chunks of ``chunks``, each checked by :func:`chunk_bytes`."""
    async for chunk in chunks:
        payload = chunk_bytes(chunk)
        if payload:
            yield payload


def staging_name(path: str) -> str:
    """A fresh temporary sibling of the absolute (or relative) ``path`` for a streamed write.

    In the same directory, so the final rename never crosses a filesystem;
    a dot name with a random part, short whatever the final name's length.
    """
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name[:64]}.mango-{secrets.token_hex(8)}.part")


@attrs.frozen
class Download:
    """An opened download: its chunks, and the size the transfer announced, if it did.

    ``size`` is what the transfer says before its body (a part's
    ``Content-Length``, an archive member's header); a bounded read checks it
    before it reads a chunk. ``None`` when the transfer says nothing.
    """

    chunks: AsyncIterator[bytes]
    size: int | None = None


class RemoteFiles:
    """Mixin giving a sandbox ``read_file``, ``open_file`` and ``write_file`` over its file API.

    The sandbox class has the attributes ``_path_policy`` (its
    :class:`~mango.provider.paths.PathPolicy`) and ``_max_read_bytes`` (the
    default bound of a buffered read; or it overrides ``_read_cap()``), and
    defines:

    * ``_stat(path)``: the policy's stat callback (absolute path; never
      follows its last component; ``None`` if missing). An API that classifies
      every component of a path in one call overrides ``_stat_for`` instead;
    * ``_download(resolved, path)``: an async context manager yielding a
      :class:`Download` of the absolute ``resolved.path`` (``path`` is the
      caller's, for messages: :func:`~mango.provider.file_not_found` if the file
      vanished since the stat);
    * ``_make_dirs(paths)``: create the missing parent directories (absolute,
      outermost first; an API with ``mkdir -p`` makes only the last);
    * ``_upload(path, data)``: create or truncate the absolute ``path``;
    * ``_upload_stream(path, chunks)``: create the absolute ``path`` (a fresh
      temporary name) from ``chunks`` as they come, without holding them;
    * ``_replace(source, destination)``: rename the absolute ``source`` over
      ``destination`` (a file or nothing; the path policy checked it);
    * ``_discard(path)``: remove the file ``path`` if it is there (a
      temporary a failed streamed write leaves).

    ``_lost(error)`` turns a retryable failure of those calls into the error
    to raise; by default the error stands (a data plane that already asks
    its control plane needs nothing more).
    """

    __slots__ = ()
    _path_policy: PathPolicy
    _max_read_bytes: int

    def _read_cap(self) -> int:
        """The default bound of a buffered read (default: ``_max_read_bytes``)."""
        return self._max_read_bytes

    async def _stat(self, path: str) -> Entry | None:
        raise NotImplementedError

    async def _stat_for(self, location: Location) -> StatCallback:
        """The stat callback that classifies ``location``'s components (default: ``_stat``)."""
        del location
        return self._stat

    def _download(self, resolved: ResolvedPath, path: str) -> AbstractAsyncContextManager[Download]:
        raise NotImplementedError

    async def _make_dirs(self, paths: tuple[str, ...]) -> None:
        raise NotImplementedError

    async def _upload(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    async def _upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        raise NotImplementedError

    async def _replace(self, source: str, destination: str) -> None:
        raise NotImplementedError

    async def _discard(self, path: str) -> None:
        raise NotImplementedError

    async def _lost(self, error: MangoError) -> MangoError:
        return error

    async def _fail(self, error: MangoError) -> NoReturn:
        meaning = await self._lost(error)
        if meaning is error:
            raise error
        raise meaning from error

    async def _resolve(self, path: str, *, write: bool) -> ResolvedPath:
        policy = self._path_policy
        location = policy.locate(path, write=write)  # the lexical rules first: no I/O for them
        await checkpoint()
        stat = await self._stat_for(location)
        if write:
            return await policy.resolve_write(path, stat)
        return await policy.resolve_read(path, stat)

    @asynccontextmanager
    async def _opened(self, path: str, limit: int | None) -> AsyncIterator[AsyncIterator[bytes]]:
        """The checked file's chunks; with ``limit``, both sizes checked against it first."""
        try:
            resolved = await self._resolve(path, write=False)
            if limit is not None and resolved.entry is not None:
                check_size(path, resolved.entry.size, limit)  # before a byte moves
            async with self._download(resolved, path) as download:
                if limit is not None:
                    check_size(path, download.size, limit)  # the file grew after the stat
                yield download.chunks
        except MangoError as exc:
            await self._fail(exc)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of the regular file ``path``, at most ``max_bytes`` (default: the read cap).

        The size is checked before the transfer and while it runs:
        :class:`~mango.provider.FileTooLarge` (with ``size`` and ``limit``) past
        the bound, memory O(bound). :class:`FileNotFoundError` if it or a
        parent is missing, :class:`~mango.provider.PathEscapeError` for
        escapes and symlinks, :class:`~mango.provider.PermanentError` for a
        directory or another non-regular file.
        """
        limit = read_limit(max_bytes, self._read_cap())
        async with self._opened(path, limit) as chunks:
            return await collect_bounded(chunks, limit, path=path)

    def open_file(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream the regular file ``path`` in chunks, whatever its size (memory O(chunk)).

        ``async with sandbox.open_file(path) as chunks: async for chunk in chunks``.
        The path is checked and the transfer opened on entry (the errors of
        :meth:`read_file`, without the bound); leaving the block closes it.
        """
        return self._opened(path, None)

    async def _ensure_directory(self, path: str) -> None:
        """Create the workspace-relative directory ``path`` and its missing parents.

        A command's working directory, entered as every provider enters it:
        each component is classified as for a write, so a symlink anywhere is
        :class:`~mango.provider.PathEscapeError` and a file in the way a
        :class:`~mango.provider.PermanentError`; what is missing is created.
        """
        try:
            policy = self._path_policy
            location = policy.locate(path, write=True, directory=True)
            await checkpoint()
            stat = await self._stat_for(location)
            resolved = await policy.resolve_directory(path, stat, create=True)
            if resolved.missing_dirs:
                await self._make_dirs(resolved.missing_dirs)
        except MangoError as exc:
            await self._fail(exc)

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path`` with ``data``, creating missing parent directories.

        :class:`~mango.provider.InvalidInput` unless ``data`` is bytes, before
        anything is sent. Never writes through a symlink
        (:class:`~mango.provider.PathEscapeError`); a directory or other
        non-regular target raises :class:`~mango.provider.PermanentError`.
        """
        payload = file_bytes(data)
        try:
            resolved = await self._resolve(path, write=True)
            if resolved.missing_dirs:
                await self._make_dirs(resolved.missing_dirs)
            await self._upload(resolved.path, payload)
        except MangoError as exc:
            await self._fail(exc)

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Create or replace ``path`` with what ``chunks`` yields, atomically (memory O(chunk)).

        The checks of :meth:`write_file` first (before a chunk is taken),
        then the chunks go to a temporary sibling that replaces ``path``
        once the last has arrived. A failure midway, cancellation included,
        removes the temporary: the old file stays, and no half file ever
        has the final name. A chunk that is not bytes is
        :class:`~mango.provider.InvalidInput`.
        """
        try:
            resolved = await self._resolve(path, write=True)
            if resolved.missing_dirs:
                await self._make_dirs(resolved.missing_dirs)
            temporary = staging_name(resolved.path)
            try:
                await self._upload_stream(temporary, checked_chunks(chunks))
                await self._replace(temporary, resolved.path)
            except BaseException:
                await _discard_quietly(self, temporary)
                raise
        except MangoError as exc:
            await self._fail(exc)


async def _discard_quietly(files: RemoteFiles, path: str) -> None:
    """Remove a failed write's temporary; the write's own error is the one to report."""
    # Shielded: a write cancelled (again) while it cleans up still removes what it left,
    # and that cancellation propagates.
    with contextlib.suppress(MangoError):
        await asyncio.shield(files._discard(path))
