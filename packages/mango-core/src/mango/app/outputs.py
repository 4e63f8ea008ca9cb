"""The Session output publisher: a sandbox's outputs directory, published in two passes.

Under the sandbox's resource lock (shared: tool steps and other exports may
run, imports wait), the directory is exported twice as the backend's own tar
stream, never held whole:

1. **inspect**: every entry is checked (:func:`~mango.domain.outputs.read_outputs`:
   regular files and directories only, clean UTF-8 names, at most 500 files
   of at most 500 MiB, no name twice) and every file hashed. Any failure
   stops here with :class:`~mango.domain.errors.OutputRejected` naming the
   entry, before a row or a byte changed.
2. **upload**: the second export must list the same files with the same
   sizes; an unchanged file (same size and SHA-256 as its published row) is
   hashed again and skipped, a new or changed one is streamed into the Files
   store as an ``uploading`` output, verified against pass 1 (rows already
   staged are kept fresh for the reconciler meanwhile). A file that changed
   between the passes is :class:`OutputRejected`, and every staged upload
   is discarded.
3. **commit**: in one transaction the staged outputs become the ready rows
   of their paths and the outputs whose path is gone, or which were
   replaced, become garbage (their blob, then their row, are removed).
   Either the whole snapshot is published or nothing changed.

A crash leaves ``uploading`` or ``deleting`` rows, which the Files store's
reconciler removes with their blobs; a ready row is never half-written.
:func:`observe_publications` lets crash-injection tests stop the process
between an output's upload and its completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal, cast

import attrs

from mango.app.files import guess_mime_type
from mango.app.session_files import SessionFiles
from mango.domain.errors import (
    CapabilityNotSupported,
    ContentMismatch,
    MangoError,
    OutputRejected,
    PreconditionFailed,
)
from mango.domain.files import BlobInfo, NewFile, StoredFile, file_blob_key, new_file_id
from mango.domain.outputs import (
    MAX_OUTPUT_FILE_BYTES,
    MAX_OUTPUT_FILES,
    OutputEntry,
    OutputFile,
    StagedOutput,
    output_filename,
    read_outputs,
)
from mango.domain.ports import ResourceLockSandbox, Sandbox, SessionOutputSandbox

__all__ = ["PublicationStep", "PublishReport", "observe_publications", "publish_outputs"]

_LOG = logging.getLogger("mango.outputs")

PublicationStep = Literal["uploaded"]
"""``uploaded``: an output's bytes are stored and verified; its row is still ``uploading``."""
_observers: list[Callable[[PublicationStep, str], None]] = []


def observe_publications(observer: Callable[[PublicationStep, str], None]) -> Callable[[], None]:
    """Call ``observer(step, output path)`` after each step of every publication; the undo.

    For crash-injection tests only (:mod:`mango.temporal.faults`).
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


@attrs.frozen
class PublishReport:
    """What one publication did."""

    files: int = 0
    """Files in the outputs directory (now the Session's outputs)."""
    published: int = 0
    """New or changed files uploaded."""
    unchanged: int = 0
    """Files whose published copy was already the same (not uploaded again)."""
    removed: int = 0
    """Previously published outputs removed because their file is gone."""


@attrs.frozen
class _Limits:
    files: int
    file_bytes: int


def _exporter(sandbox: Sandbox, session_id: str, provider: str) -> SessionOutputSandbox:
    if not (isinstance(sandbox, SessionOutputSandbox) and isinstance(sandbox, ResourceLockSandbox)):
        raise CapabilityNotSupported(
            provider,
            [f"{provider} does not support session output mounts (session {session_id!r})"],
        )
    return sandbox


def _changed(path: str, why: str) -> OutputRejected:
    return OutputRejected(
        f"cannot publish the Session's outputs: {path!r} {why} while it was exported",
        path=path,
        hint="publish again once the commands writing to /mnt/session/outputs are done",
    )


async def _hashed(body: AsyncIterator[bytes]) -> BlobInfo:
    digest = hashlib.sha256()
    size = 0
    async for chunk in body:
        digest.update(chunk)
        size += len(chunk)
    return BlobInfo(size, digest.hexdigest())


async def publish_outputs(
    files: SessionFiles,
    session_id: str,
    sandbox: Sandbox,
    provider: str,
    *,
    max_files: int = MAX_OUTPUT_FILES,
    max_file_bytes: int = MAX_OUTPUT_FILE_BYTES,
) -> PublishReport:
    """Publish ``sandbox``'s outputs directory as the Session's outputs (see the module)."""
    exporter = _exporter(sandbox, session_id, provider)
    locking = cast(ResourceLockSandbox, sandbox)  # _exporter checked both protocols
    limits = _Limits(max_files, max_file_bytes)
    async with locking.resource_lock(exclusive=False):
        snapshot = await _inspect(exporter, limits)
        current = {
            row.output_path: row
            for row in await files.outputs.list_outputs(session_id)
            if row.output_path is not None
        }
        staged: list[StagedOutput] = []
        try:
            unchanged = await _stage(
                files,
                session_id,
                exporter,
                snapshot=snapshot,
                current=current,
                limits=limits,
                staged=staged,
            )
            commit = await files.outputs.commit_snapshot(
                session_id, list(snapshot), staged, limit=limits.files
            )
        except BaseException:
            await _discard(files, staged)
            raise
    await _collect(files, commit.garbage)
    removed = len(set(current) - set(snapshot))
    return PublishReport(len(snapshot), len(staged), unchanged, removed)


async def _stage(
    files: SessionFiles,
    session_id: str,
    exporter: SessionOutputSandbox,
    *,
    snapshot: dict[str, OutputEntry],
    current: dict[str, StoredFile],
    limits: _Limits,
    staged: list[StagedOutput],
) -> int:
    """Pass 2: upload what is new or changed into ``staged``; return how many were unchanged."""
    unchanged = 0
    seen: set[str] = set()
    fresh = _Freshness(files)
    async with exporter.open_session_outputs() as chunks:
        async for item in read_outputs(
            chunks, max_files=limits.files, max_file_bytes=limits.file_bytes
        ):
            expected = snapshot.get(item.path)
            if expected is None:
                raise _changed(item.path, "appeared")
            if item.size != expected.size:
                raise _changed(item.path, f"changed size ({expected.size} -> {item.size} bytes)")
            seen.add(item.path)
            published = current.get(item.path)
            if published is not None and (published.size, published.sha256) == (
                expected.size,
                expected.sha256,
            ):
                if (await _hashed(item.body)).sha256 != expected.sha256:
                    raise _changed(item.path, "changed content")
                unchanged += 1
            else:
                staged.append(await _upload(files, session_id, item, expected))
            await fresh.keep(staged)
    missing = sorted(set(snapshot) - seen)
    if missing:
        raise _changed(missing[0], "disappeared")
    return unchanged


@attrs.define
class _Freshness:
    """Refreshes the staged rows every heartbeat, so the reconciler never gives them up."""

    files: SessionFiles
    last: float = attrs.field(factory=time.monotonic)

    async def keep(self, staged: Sequence[StagedOutput]) -> None:
        now = time.monotonic()
        if now - self.last < self.files.files.heartbeat:
            return
        self.last = now
        for item in staged:
            if not await self.files.files.catalog.touch_upload(item.file_id):
                raise PreconditionFailed(
                    f"a staged output ({item.file_id}) was given up before it was published",
                    hint="publish the Session's outputs again",
                )


async def _inspect(exporter: SessionOutputSandbox, limits: _Limits) -> dict[str, OutputEntry]:
    """Pass 1: every entry checked, every file hashed; nothing changes."""
    snapshot: dict[str, OutputEntry] = {}
    async with exporter.open_session_outputs() as chunks:
        async for item in read_outputs(
            chunks, max_files=limits.files, max_file_bytes=limits.file_bytes
        ):
            info = await _hashed(item.body)
            if info.size != item.size:  # pragma: no cover - the reader yields exactly size bytes
                raise _changed(item.path, "changed size")
            snapshot[item.path] = OutputEntry(item.path, info.size, info.sha256)
    return snapshot


async def _upload(
    files: SessionFiles, session_id: str, item: OutputFile, expected: OutputEntry
) -> StagedOutput:
    """Store one output as an ``uploading`` row, verified against pass 1."""
    store = files.files
    file_id = new_file_id()
    new = NewFile(
        file_id=file_id,
        filename=output_filename(item.path),
        mime_type=guess_mime_type(item.path),
        blob_key=file_blob_key(store.namespace, file_id),
        session_id=session_id,
        output_path=item.path,
    )
    await store.catalog.begin_upload(new)
    staged = StagedOutput(file_id, BlobInfo(expected.size, expected.sha256))
    try:
        info = await store.blobs.put(
            new.blob_key,
            store.refreshing(file_id, item.body),
            size=expected.size,
            sha256=expected.sha256,
        )
        for observer in _observers:
            observer("uploaded", item.path)
    except ContentMismatch as exc:
        await _discard(files, [staged])
        raise _changed(item.path, "changed content") from exc
    except BaseException:
        await _discard(files, [staged])
        raise
    return StagedOutput(file_id, info)


async def _discard(files: SessionFiles, staged: Sequence[StagedOutput]) -> None:
    """Undo staged uploads (never a ready row: a lost commit's answer stays)."""
    store = files.files

    async def discard_all() -> None:
        for item in staged:
            await store.discard_upload(item.file_id, file_blob_key(store.namespace, item.file_id))

    cleanup = asyncio.ensure_future(discard_all())
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(cleanup)


async def _collect(files: SessionFiles, garbage: Sequence[StoredFile]) -> int:
    """Remove garbage rows' blobs, then the rows; the reconciler finishes what fails here."""
    removed = 0
    for row in garbage:
        try:
            await files.files.blobs.delete(row.blob_key)
            removed += await files.files.catalog.remove_file(row.file_id)
        except MangoError as exc:
            _LOG.info("old output %s not removed yet (reconcile will): %s", row.file_id, exc)
    return removed
