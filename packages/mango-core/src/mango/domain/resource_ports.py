"""The sandbox protocols of the optional capabilities (re-exported by :mod:`mango.domain.ports`).

A provider that declares ``limited-network`` hands out
:class:`LimitedNetworkSandbox` sandboxes; ``package-setup`` may need
:class:`PackageSetupSandbox` (see there).

A provider that declares ``file-resources`` hands out sandboxes that are
:class:`FileResourceSandbox` and :class:`ResourceLockSandbox`; one that
declares ``session-outputs``, sandboxes that are :class:`SessionOutputSandbox`
and :class:`ResourceLockSandbox`; one that declares ``skill-bundles``,
sandboxes that are :class:`SkillBundleSandbox` and :class:`ResourceLockSandbox`.
The mango-conformance suite checks each contract below on the provider (its
``file-resources``, ``session-outputs`` and ``skill-bundles`` groups).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from mango.domain.resources import FileResourceMount
from mango.domain.skills import SkillMount

__all__ = [
    "FileResourceSandbox",
    "LimitedNetworkSandbox",
    "PackageSetupSandbox",
    "ResourceLockSandbox",
    "SessionOutputSandbox",
    "SkillBundleSandbox",
]


@runtime_checkable
class ResourceLockSandbox(Protocol):
    """The resource lock of one sandbox: shared while exporting, exclusive while importing.

    It excludes holders in every process of the host (a ``flock`` on a
    provider-owned file), so two workers never import into, and export from,
    one sandbox at once. File Resource imports and removals take it
    exclusively themselves; an output export's caller holds it shared across
    both passes of a publication. Not reentrant: a holder of the shared lock
    must not import.
    """

    def resource_lock(self, *, exclusive: bool = False) -> AbstractAsyncContextManager[None]:
        """Hold the lock for the block (``async with sandbox.resource_lock():``).

        A wait longer than the provider's bound is
        :class:`~mango.domain.errors.ProviderUnavailable` (retry); a sandbox
        that has no provider-owned state to lock (a container older than its
        mounts) is a :class:`~mango.domain.errors.PermanentError`.
        """
        ...


@runtime_checkable
class FileResourceSandbox(Protocol):
    """Capability ``file-resources``: stored files, read-only below ``/mnt/session/uploads``."""

    async def has_file_resource(self, mount: FileResourceMount) -> bool:
        """True if ``mount.runtime_path`` holds this identity's complete, read-only copy.

        Checked by the provider's own marker and the file's type, size and
        permissions (the content is not hashed again). A sandbox without
        the uploads mount answers False.
        """
        ...

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        """Copy the bytes of ``chunks`` to ``mount.runtime_path``, all or nothing.

        * Streamed into a temporary file beside the target (memory O(chunk)),
          counted and hashed: another size or SHA-256 than ``mount`` says is
          :class:`~mango.domain.errors.ContentMismatch`, and an error raised
          by ``chunks`` propagates; either way nothing visible changes (the
          previous file at the path, if any, stays).
        * Then made durable and read-only, and renamed onto the target in
          one step; the marker naming ``mount.identity`` is written last.
        * The copy is read-only to everything in the sandbox, its root
          user included.
        * Takes the exclusive resource lock. A sandbox that predates the
          uploads mount raises :class:`~mango.domain.errors.PermanentError`
          saying to recreate it.
        """
        ...

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        """Remove ``identity``'s copy at ``runtime_path``; idempotent.

        A path whose marker names another identity (a newer resource reused
        it) is left as it is. Whatever an interrupted import or removal left
        at the path (a temporary file, a copy without its marker) goes.
        Parents left empty are pruned. A sandbox without the uploads mount
        has nothing to remove: success.
        """
        ...


@runtime_checkable
class SkillBundleSandbox(Protocol):
    """Capability ``skill-bundles``: verified skill trees, read-only below ``/workspace/skills``."""

    async def has_skill_bundles(self, mounts: Sequence[SkillMount]) -> Sequence[bool]:
        """For each of ``mounts``, in order: does its runtime path hold its complete tree?

        One call for all of a Session's skills, since it runs before every
        tool step (Docker answers them in one thread hop; a remote backend
        could in one round trip). Each is checked by the provider's marker
        (every field of the mount) and a walk of the tree: a real directory
        with ``SKILL.md`` at its top, no symlink, every file regular with no
        write bit, the sizes adding up to ``expanded_size`` (the content is
        not hashed again). Anything else (a file missing, a mode changed, a
        size drifted) is False, so the caller imports again: damage is
        repaired. A sandbox without the skills mount answers False for each.
        """
        ...

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        """Verify the archive in ``chunks`` and publish its tree at ``mount.runtime_path``.

        * The archive is streamed to provider-private storage (memory
          O(chunk)), counted and hashed: another size or SHA-256 is
          :class:`~mango.domain.errors.ContentMismatch`, and nothing visible
          changes.
        * Every entry is checked again (the rules of
          :mod:`mango.domain.skill_archives`; a breach is
          :class:`~mango.domain.errors.UnsafeArchiveError`) and extracted into
          a staging directory, counted against the sizes the entries and
          ``mount`` declare; files become ``0444`` plus their exec bits.
        * Only a complete tree is renamed onto the runtime path (a damaged
          one there is replaced in the same step), then the marker is
          written. A partial tree is never visible, and staging directories
          an interrupted import left are removed by the next import.
        * The tree is read-only to everything in the sandbox, its root user
          included. Takes the exclusive resource lock. A sandbox that
          predates the skills mount raises
          :class:`~mango.domain.errors.PermanentError` saying to recreate it.
        """
        ...


@runtime_checkable
class SessionOutputSandbox(Protocol):
    """Capability ``session-outputs``: ``/mnt/session/outputs``, exported as a tar stream."""

    def open_session_outputs(self) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream the outputs directory as a tar archive (``async with ... as chunks``).

        * The archive is the backend's own, streamed (memory O(chunk)): its
          entries keep their types, so a symlink, hardlink, device or FIFO
          reaches the caller as such, never resolved or dropped.
        * Repeatable: while the caller holds the resource lock, a second
          export gives the same entries and bytes.
        * Tools (``write_file`` with an absolute path below the mount) and
          commands see the same directory.
        * A sandbox that predates the outputs mount raises
          :class:`~mango.domain.errors.PermanentError` saying to recreate it,
          never an empty archive.
        """
        ...


@runtime_checkable
class LimitedNetworkSandbox(Protocol):
    """Capability ``limited-network``: egress restricted to an allowlist."""

    async def apply_limited_network(self, allowed_hosts: Sequence[str]) -> None:
        """Replace the egress allowlist. Idempotent; an empty list blocks all egress."""
        ...


@runtime_checkable
class PackageSetupSandbox(Protocol):
    """Capability ``package-setup``, optional part: what a sandbox needs only while it installs.

    SessionManager installs a Session's packages itself, through ``exec``
    (:mod:`mango.app.packages`). A provider whose sandboxes need something
    for that step alone implements this: Docker gives a sandbox whose spec
    says ``network="none"`` a network while its package managers run, and
    takes it away before the binding is published. SessionManager calls
    :meth:`begin_package_setup` before the first package command and
    :meth:`end_package_setup` after the last (also, best effort, after a
    failed one), both before the final network policy and the binding. A
    crash between them leaves no binding, so the retry (which finds the same
    sandbox) begins and ends again: both are idempotent.
    """

    async def begin_package_setup(self) -> None:
        """Give the sandbox what its package managers need (for example a network)."""
        ...

    async def end_package_setup(self) -> None:
        """Take it away again: afterwards the sandbox is exactly as its spec says.

        A failure raises (so no binding is published); it never reports
        success with the setup's extras still in place.
        """
        ...
