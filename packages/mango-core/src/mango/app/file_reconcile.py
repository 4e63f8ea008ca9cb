"""The Files store's reconciler pass: what crashes left, found and removed.

Rows are always written before their blob and removed after it, so a pass
can judge everything from the two sides: stalled uploads are given up,
``deleting`` rows lose their blob and then the row, blobs under the
deployment's prefix that no row names (older than ``stale_after``) go, and
then the store's own leftovers of interrupted puts. Every item is attempted;
failures are reported, not raised.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

from mango.domain.errors import InvalidInput, MangoError
from mango.domain.files import FileCatalog, FileStore, file_blob_prefix, validate_file_id

__all__ = ["DEFAULT_STALE_AFTER", "FileReconcileReport", "reconcile_files"]

DEFAULT_STALE_AFTER = timedelta(hours=1)
"""How long an upload's row may go untouched before the reconciler gives it up."""
_SWEEP_BATCH = 500


@attrs.frozen
class FileReconcileReport:
    """What one reconciler pass did; ``failures`` are ``(file id or key, message)``."""

    abandoned_uploads: int = 0
    removed_files: int = 0
    orphan_blobs: int = 0
    incomplete_puts: int = 0
    failures: tuple[tuple[str, str], ...] = ()


async def reconcile_files(
    catalog: FileCatalog,
    blobs: FileStore,
    namespace: str,
    *,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
    limit: int = 1000,
) -> FileReconcileReport:
    """One pass over ``catalog`` and ``blobs`` for the deployment ``namespace``."""
    failures: list[tuple[str, str]] = []
    abandoned = await catalog.abandon_stale_uploads(stale_after, limit)
    removed = 0
    for row in await catalog.deleting_files(limit):
        try:
            await blobs.delete(row.blob_key)
            removed += await catalog.remove_file(row.file_id)
        except MangoError as exc:
            failures.append((row.file_id, str(exc)))
    orphans = await _remove_orphans(catalog, blobs, namespace, stale_after, failures)
    incomplete = await blobs.discard_incomplete(stale_after)
    return FileReconcileReport(abandoned, removed, orphans, incomplete, tuple(failures))


async def _remove_orphans(
    catalog: FileCatalog,
    blobs: FileStore,
    namespace: str,
    stale_after: timedelta,
    failures: list[tuple[str, str]],
) -> int:
    prefix = file_blob_prefix(namespace)
    cutoff = datetime.now(UTC) - stale_after
    removed = 0
    batch: list[str] = []

    async def sweep() -> int:
        known = await catalog.known_blob_keys(batch)
        count = 0
        for key in batch:
            if key in known:
                continue
            try:
                count += await blobs.delete(key)
            except MangoError as exc:
                failures.append((key, str(exc)))
        batch.clear()
        return count

    async for entry in blobs.scan(prefix):
        try:
            validate_file_id(entry.key[len(prefix) :])
        except InvalidInput:
            continue  # not a stored file's key: not ours to judge
        if entry.modified <= cutoff:
            batch.append(entry.key)
        if len(batch) >= _SWEEP_BATCH:
            removed += await sweep()
    if batch:
        removed += await sweep()
    return removed
