"""The local provider: one workspace directory per Session key on the worker host."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from mango.local.layout import (
    PROVIDER_NAME,
    check_base_dir,
    check_listed_dir,
    check_reference,
    check_removal,
    ensure_session_dir,
    expected_session_dir,
    list_session_dirs,
    owned_session_dir,
    remove_session,
    verify_session_dir,
)
from mango.local.sandbox import DESTROY_WAIT_SECONDS, LocalSandbox, checkpoint
from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_PROCESS_LOG_BYTES,
    DEFAULT_MAX_READ_BYTES,
    Capability,
    CapabilitySet,
    InvalidInput,
    OwnedResource,
    SandboxRef,
    SandboxSpec,
    positive_int,
    validate_session_id,
)
from mango.provider.execution import ExecTracker
from mango.provider.ownership import Ownership, namespace_field

__all__ = ["CAPABILITIES", "DEFAULT_MAX_OUTPUT_BYTES", "LocalProvider"]

CAPABILITIES = CapabilitySet.of(Capability.FILE_API, Capability.BACKGROUND_PROCESSES)
"""What the local provider declares: the file API (:mod:`mango.local.fileapi`) and background
processes (:mod:`mango.local.processes`)."""


def _as_path(value: str | os.PathLike[str]) -> Path:
    # Absolute now, so a later chdir of the worker cannot move the sandboxes.
    return Path(value).absolute()


def _check_spec(spec: object) -> SandboxSpec:
    if not isinstance(spec, SandboxSpec):
        raise InvalidInput(f"expected a SandboxSpec, got {type(spec).__name__}")
    return spec


@attrs.define(eq=False, on_setattr=attrs.setters.frozen)
class LocalProvider:
    """Sandboxes as directories under ``base_dir``, commands as host processes.

    **Not an isolation boundary**: commands share the worker's kernel,
    filesystem, network and user. For development and tests only. It declares
    the file API and background processes only, so package setup, limited
    network and resource mounts are rejected at admission.

    ``create`` is create-if-absent by a hash of the Session key, so a fresh
    instance over the same ``base_dir`` (a restarted worker) finds what an
    earlier one made. ``max_output_bytes`` caps each output stream of an exec;
    ``max_read_bytes`` is the default bound of a buffered ``read_file``.
    ``namespace`` is the deployment's (``ProviderContext.namespace``): two
    providers with different namespaces over one ``base_dir`` never share,
    see or remove each other's directories.
    """

    base_dir: Path = attrs.field(converter=_as_path)
    """Where session directories live; created on first use."""
    max_output_bytes: int = attrs.field(
        default=DEFAULT_MAX_OUTPUT_BYTES, kw_only=True, validator=positive_int
    )
    """Per-stream cap on the bytes an exec keeps."""
    max_read_bytes: int = attrs.field(
        default=DEFAULT_MAX_READ_BYTES, kw_only=True, validator=positive_int
    )
    """Default bound of a buffered ``read_file`` (``MANGO_MAX_READ_BYTES``)."""
    max_process_log_bytes: int = attrs.field(
        default=DEFAULT_MAX_PROCESS_LOG_BYTES, kw_only=True, validator=positive_int
    )
    """Cap on the log a background process keeps (``MANGO_MAX_PROCESS_LOG_BYTES``)."""
    namespace: str = namespace_field()
    """The deployment namespace every owner record and directory name carries."""
    _tracker: ExecTracker = attrs.field(factory=ExecTracker, init=False, repr=False)

    @property
    def name(self) -> str:
        """Always ``local``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """The file API and background processes only: setup, network and mounts are refused."""
        return CAPABILITIES

    @property
    def ownership(self) -> Ownership:
        """Labels and names of this provider in its namespace."""
        return Ownership(PROVIDER_NAME, self.namespace)

    def _sandbox(self, session_dir: Path, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(
            ref=SandboxRef(PROVIDER_NAME, str(session_dir)),
            session_dir=session_dir,
            spec=spec,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
            max_process_log_bytes=self.max_process_log_bytes,
            tracker=self._tracker,
        )

    async def create(self, session_key: str, spec: SandboxSpec) -> LocalSandbox:
        """Create-if-absent the sandbox of ``session_key``; idempotent.

        Raises :class:`InvalidInput` for an invalid key. A task cancelled
        before the call creates nothing.
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        await checkpoint()
        session_dir = await asyncio.to_thread(
            ensure_session_dir, self.base_dir, self.ownership, key
        )
        return self._sandbox(session_dir, spec)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> LocalSandbox:
        """Rebuild a client for ``ref`` after verifying it belongs to ``session_key``.

        Raises :class:`OwnershipError` if ``ref`` names another provider, a
        path other than this key's directory, or a directory whose marker does
        not match; :class:`SandboxNotFound` if the directory is gone (nothing
        is recreated).
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        ref = self.ownership.check_ref(ref)
        await checkpoint()
        session_dir = await asyncio.to_thread(
            verify_session_dir, self.base_dir, self.ownership, key, ref.external_id
        )
        return self._sandbox(session_dir, spec)

    async def find(self, session_key: str) -> SandboxRef | None:
        """The reference of ``session_key``'s directory in this namespace, or None.

        Read-only. Raises :class:`OwnershipError` if a directory with that
        name carries another owner record.
        """
        key = validate_session_id(session_key)
        expected = expected_session_dir(self.base_dir, self.ownership, key)
        session_dir = await asyncio.to_thread(
            owned_session_dir, self.base_dir, self.ownership, key, str(expected)
        )
        return None if session_dir is None else SandboxRef(PROVIDER_NAME, str(session_dir))

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Remove ``ref``'s directory and everything of it without attaching; idempotent.

        Ownership is checked by the path and the owner record outside the
        session directory (never by anything a command can reach through the
        workspace); raises :class:`OwnershipError` for another Session's or
        another deployment's directory. Commands running in it are killed
        first, whichever process started them; the leftovers of an
        interrupted removal are finished.
        """
        key = validate_session_id(session_key)
        ref = self.ownership.check_ref(ref)
        await checkpoint()
        session_dir = await asyncio.to_thread(
            check_reference, self.base_dir, self.ownership, key, ref.external_id
        )
        await self._remove(key, session_dir, force=False)

    async def purge(self, session_key: str, *, force: bool = False) -> None:
        """Remove everything ``session_key`` has under ``base_dir``, by its names; idempotent.

        The session directory (whatever a command turned it into), the
        leftovers of an interrupted removal, the run records and the owner
        record. The owner record is checked first (:class:`OwnershipError` for
        another owner's, or for none beside an existing directory) unless
        ``force``: then the directory named for this key in this namespace is
        removed whatever the records say (links are never followed).
        """
        key = validate_session_id(session_key)
        await checkpoint()
        await self._remove(
            key, expected_session_dir(self.base_dir, self.ownership, key), force=force
        )

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Remove a listed session directory by its owner record (``mango gc``); idempotent.

        The path must be a session directory under ``base_dir`` whose owner
        record carries this namespace and ``resource.session_hash``
        (:class:`OwnershipError` otherwise). Its commands are killed first.
        """
        await checkpoint()
        session_dir = await asyncio.to_thread(
            check_listed_dir, self.base_dir, self.ownership, resource
        )
        await self._tracker.terminate(str(session_dir), DESTROY_WAIT_SECONDS)
        await asyncio.to_thread(remove_session, session_dir)

    async def _remove(self, key: str, session_dir: Path, *, force: bool) -> None:
        if not force:
            await asyncio.to_thread(check_removal, session_dir, self.ownership, key)
        await self._tracker.terminate(str(session_dir), DESTROY_WAIT_SECONDS)
        await asyncio.to_thread(remove_session, session_dir)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every session directory under ``base_dir`` that this namespace owns."""
        return await asyncio.to_thread(list_session_dirs, self.base_dir, self.ownership)

    async def health(self) -> str:
        """Check that sandboxes can be made under ``base_dir`` (created and writable)."""
        return await asyncio.to_thread(check_base_dir, self.base_dir)

    async def aclose(self) -> None:
        """Nothing to release: sandboxes and running commands are left as they are."""
