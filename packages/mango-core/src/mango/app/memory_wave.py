"""The Memory Store wave: refresh before the first tool, write back after the last.

A Session's tool steps run in *waves*. Every tool holds the sandbox's
resource lock *shared* while it runs, so concurrent tools of one Session run
together; the Memory Store mounts change only under the lock held
*exclusively*, so never under a running tool:

* :func:`begin_wave` (before a tool, the lifecycle's ``refresh-memory``)
  *tries* the exclusive lock once. If a tool holds the lock, the wave is
  running: the new tool joins it without a refresh. Otherwise it converges
  every mount (below) and releases the lock.
* :func:`end_wave` (after the tool released its shared lock,
  ``write-back-memory``) *waits* for the exclusive lock, which it gets once
  the wave's last tool has released its shared lock, and converges every
  mount. The first tool of a wave to finish commits the whole wave's
  changes; the others find nothing left to write. ``final-memory-writeback``
  (the Session's deletion, before its sandbox goes) is the same step.

Converging one mount (under the exclusive lock): read the mount (its
baseline and its files); for a ``read_write`` mount with a baseline and a
local change, commit the change against the baseline in one transaction
(``session_actor`` versions, :meth:`~mango.domain.memories.MemoryRepository.sync`)
-- this also writes back what an interrupted step left, so a crash between a
tool and its writeback loses nothing and commits it once; then make the
mount hold the new heads (the new baseline), skipped when it holds them
already. A mount without a baseline (new, or a refresh cut short) is only
refreshed.

A change that cannot be committed (:class:`~mango.domain.errors.MemoryConflict`:
another writer changed the same memory; :class:`~mango.domain.errors.InvalidMemory`:
a limit, a symlink; an archived store) is discarded -- the mount is
refreshed from the heads, so the stale change cannot fence every later tool
-- and reported in :attr:`WaveReport.errors` (the tool's result says the
writeback failed). Infrastructure errors (the database, the host
directory) propagate and leave the mount as it is, for a retry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from mango.domain.errors import InvalidInput, MemoryConflict, PermanentError
from mango.domain.memories import Actor, MemoryFile, MemoryHead, MemoryRepository, MemoryStoreMount
from mango.domain.ports import MemoryStoreSandbox

__all__ = ["WaveReport", "begin_wave", "converge", "end_wave", "writeback_failure"]

log = logging.getLogger("mango.app.memory_wave")

_DISCARDED = (MemoryConflict, InvalidInput)
"""Domain errors: the change is discarded (InvalidMemory and 'archived' are InvalidInput)."""


@attrs.frozen
class WaveReport:
    """What one wave step did."""

    joined: bool = False
    """The step found a wave running and joined it (nothing was converged)."""
    committed: int = 0
    """Mounts whose local changes were committed as new versions."""
    refreshed: int = 0
    """Mounts rewritten from the heads."""
    errors: tuple[str, ...] = ()
    """The changes that could not be written back (discarded), one sentence each."""


def writeback_failure(report: WaveReport) -> str | None:
    """``Memory Store writeback failed: ...`` for a report with errors, else None."""
    if not report.errors:
        return None
    return "Memory Store writeback failed: " + "; ".join(report.errors)


def _files(heads: Sequence[MemoryHead]) -> list[MemoryFile]:
    return [MemoryFile(head.path, head.content, head.memory_id) for head in heads]


async def converge(
    sandbox: MemoryStoreSandbox,
    repository: MemoryRepository,
    mount: MemoryStoreMount,
    session_id: str,
) -> tuple[bool, bool]:
    """Converge one mount (the caller holds the exclusive lock); (committed, refreshed).

    Raises the domain error of a discarded change after the refresh.
    """
    try:
        snapshot = await sandbox.read_memory_store(mount)
    except InvalidInput:  # a symlink, a file over the limits: discard it with the rest
        await _refresh(sandbox, repository, mount)
        raise
    if snapshot.initialized and not mount.read_only and snapshot.changed:
        try:
            heads = await repository.sync(
                mount.store_id, snapshot.baseline, snapshot.files, Actor.session(session_id)
            )
        except _DISCARDED:
            await _refresh(sandbox, repository, mount)
            raise
        await sandbox.replace_memory_store(mount, _files(heads))
        return True, True
    # Nothing local to commit: refresh only if the heads moved (digests, no content).
    if (
        snapshot.initialized
        and not snapshot.changed
        and list(await repository.digests(mount.store_id)) == list(snapshot.baseline)
    ):
        return False, False
    await sandbox.replace_memory_store(mount, _files(await repository.heads(mount.store_id)))
    return False, True


async def _refresh(
    sandbox: MemoryStoreSandbox, repository: MemoryRepository, mount: MemoryStoreMount
) -> None:
    """Best effort: the mount from the heads (a failure here is logged; the first error wins)."""
    try:
        await sandbox.replace_memory_store(mount, _files(await repository.heads(mount.store_id)))
    except (PermanentError, OSError) as exc:  # pragma: no cover - reported, the caller raises
        log.warning("memory store %s: the refresh after a failed writeback failed: %s",
                    mount.store_id, exc)  # fmt: skip


async def _converge_all(
    sandbox: MemoryStoreSandbox,
    repository: MemoryRepository,
    mounts: Sequence[MemoryStoreMount],
    session_id: str,
) -> WaveReport:
    committed = refreshed = 0
    errors: list[str] = []
    for mount in mounts:
        try:
            did_commit, did_refresh = await converge(sandbox, repository, mount, session_id)
        except _DISCARDED as exc:
            log.warning("session %s, memory store %s: %s", session_id, mount.store_id, exc)
            errors.append(f"{mount.runtime_path}: {exc}")
            refreshed += 1
            continue
        committed += did_commit
        refreshed += did_refresh
    return WaveReport(committed=committed, refreshed=refreshed, errors=tuple(errors))


async def begin_wave(
    sandbox: MemoryStoreSandbox,
    repository: MemoryRepository,
    mounts: Sequence[MemoryStoreMount],
    session_id: str,
) -> WaveReport:
    """Before a tool: join a running wave, or converge every mount (see the module)."""
    async with sandbox.memory_sync_lock(wait=False) as held:
        if not held:
            return WaveReport(joined=True)
        return await _converge_all(sandbox, repository, mounts, session_id)


async def end_wave(
    sandbox: MemoryStoreSandbox,
    repository: MemoryRepository,
    mounts: Sequence[MemoryStoreMount],
    session_id: str,
) -> WaveReport:
    """After a tool (or before the sandbox's deletion): wait for the wave's end, converge."""
    async with sandbox.memory_sync_lock(wait=True):
        return await _converge_all(sandbox, repository, mounts, session_id)
