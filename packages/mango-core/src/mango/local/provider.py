"""The local provider: one workspace directory per Session key on the worker host."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import attrs

from mango.config import DEFAULT_MAX_OUTPUT_BYTES
from mango.domain.capabilities import CapabilitySet
from mango.domain.errors import InvalidInput, OwnershipError
from mango.domain.values import SandboxRef, SandboxSpec, validate_session_id
from mango.local.layout import PROVIDER_NAME, ensure_session_dir, verify_session_dir
from mango.local.sandbox import LocalSandbox, checkpoint
from mango.provider.execution import ExecTracker

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "LocalProvider"]

"""Default cap, per stream, on the output an exec keeps."""


def _as_path(value: str | os.PathLike[str]) -> Path:
    # Absolute now, so a later chdir of the worker cannot move the sandboxes.
    return Path(value).absolute()


def _positive_int(_instance: object, _attribute: object, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"max_output_bytes must be a positive integer, got {value!r}")


def _check_spec(spec: object) -> SandboxSpec:
    if not isinstance(spec, SandboxSpec):
        raise InvalidInput(f"expected a SandboxSpec, got {type(spec).__name__}")
    return spec


@attrs.define(eq=False, on_setattr=attrs.setters.frozen)
class LocalProvider:
    """Sandboxes as directories under ``base_dir``, commands as host processes.

    **Not an isolation boundary**: commands share the worker's kernel,
    filesystem, network and user. For development and tests only. It declares
    no capabilities, so package setup, limited network and resource mounts
    are rejected at admission.

    ``create`` is create-if-absent by a hash of the Session key, so a fresh
    instance over the same ``base_dir`` (a restarted worker) finds what an
    earlier one made. ``max_output_bytes`` caps each output stream of an exec.
    """

    base_dir: Path = attrs.field(converter=_as_path)
    """Where session directories live; created on first use."""
    max_output_bytes: int = attrs.field(
        default=DEFAULT_MAX_OUTPUT_BYTES, kw_only=True, validator=_positive_int
    )
    """Per-stream cap on the bytes an exec keeps."""
    _tracker: ExecTracker = attrs.field(factory=ExecTracker, init=False, repr=False)

    @property
    def name(self) -> str:
        """Always ``"local"``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """The empty set: the local provider supports only the core contract."""
        return CapabilitySet()

    def _sandbox(self, session_dir: Path, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(
            ref=SandboxRef(PROVIDER_NAME, str(session_dir)),
            session_dir=session_dir,
            spec=spec,
            max_output_bytes=self.max_output_bytes,
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
        session_dir = await asyncio.to_thread(ensure_session_dir, self.base_dir, key)
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
        if not isinstance(ref, SandboxRef):
            raise InvalidInput(f"expected a SandboxRef, got {type(ref).__name__}")
        if ref.provider != PROVIDER_NAME:
            raise OwnershipError(
                f"sandbox reference {ref} belongs to provider {ref.provider!r}, "
                f"not {PROVIDER_NAME!r}"
            )
        await checkpoint()
        session_dir = await asyncio.to_thread(
            verify_session_dir, self.base_dir, key, ref.external_id
        )
        return self._sandbox(session_dir, spec)

    async def aclose(self) -> None:
        """Nothing to release: sandboxes and running commands are left as they are."""
