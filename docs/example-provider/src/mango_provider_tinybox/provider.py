"""TinyboxProvider: one host directory (a box) per Session key, found again by its name.

The box's name is the kit's deterministic name of (provider, deployment
namespace, Session key), so create is idempotent, a fresh instance (a
restarted worker) finds what another made, attach checks ownership without a
database, and two deployments sharing a base directory never share a box.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_READ_BYTES,
    CapabilitySet,
    OwnedResource,
    OwnershipError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    max_output_bytes,
    max_read_bytes,
)
from mango.provider.hostdirs import (
    DELETING_MARK,
    absolute_dir_setting,
    ensure_private_dir,
    host_errors,
)
from mango.provider.ownership import NAME_PREFIX, Ownership, derived_namespace
from mango_provider_tinybox.sandbox import OWNER, RUNS, WORKSPACE, TinyboxSandbox, remove_box

PROVIDER_NAME = "tinybox"
SETTING = "TINYBOX_DIR"


class TinyboxProvider:
    """Boxes under ``base_dir``; any number of instances over one directory agree."""

    def __init__(
        self,
        base_dir: Path,
        *,
        namespace: str,
        output_cap: int = DEFAULT_MAX_OUTPUT_BYTES,
        read_cap: int = DEFAULT_MAX_READ_BYTES,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.ownership = Ownership(PROVIDER_NAME, namespace)  # labels, names, checks
        self.output_cap = output_cap
        self.read_cap = read_cap

    @classmethod
    def from_settings(cls, environ: Mapping[str, str], *, namespace: str) -> TinyboxProvider:
        """``TINYBOX_DIR`` and the shared caps, from the environment the caller chose."""
        return cls(
            absolute_dir_setting(SETTING, environ.get(SETTING, "")),  # ConfigurationError
            namespace=namespace,
            output_cap=max_output_bytes(environ),  # MANGO_MAX_OUTPUT_BYTES, range-checked
            read_cap=max_read_bytes(environ),  # MANGO_MAX_READ_BYTES
        )

    @property
    def name(self) -> str:
        """Always ``tinybox``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """No optional capability: the core contract only."""
        return CapabilitySet()

    async def create(self, session_key: str, spec: SandboxSpec) -> TinyboxSandbox:
        """Create-if-absent the box of ``session_key``; the same key gives the same ref."""
        external_id = self.ownership.name(session_key)  # InvalidInput for a bad key
        await asyncio.to_thread(self._ensure, external_id, session_key)
        return self._sandbox(external_id, spec)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> TinyboxSandbox:
        """A client for ``ref`` once it is proven ``session_key``'s; never creates."""
        if await self._owned(session_key, ref) is None:
            raise SandboxNotFound(f"{ref} no longer exists")
        return self._sandbox(ref.external_id, spec)

    async def find(self, session_key: str) -> SandboxRef | None:
        """The ref of ``session_key``'s box, or None; read-only."""
        ref = SandboxRef(PROVIDER_NAME, self.ownership.name(session_key))
        return await self._owned(session_key, ref)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Remove ``ref``'s box after checking its owner record; idempotent."""
        await self._owned(session_key, ref)
        await asyncio.to_thread(remove_box, self.base_dir / ref.external_id)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every box under ``base_dir`` whose owner record names this namespace."""
        return await asyncio.to_thread(self._list)

    async def health(self) -> str:
        """A real round trip: the base directory exists, or can be made."""
        with host_errors(self.base_dir, setting=SETTING, what="cannot use tinybox's base"):
            await asyncio.to_thread(self.base_dir.mkdir, parents=True, exist_ok=True)
        return f"base directory {self.base_dir}"

    async def aclose(self) -> None:
        """Nothing to release."""

    async def _owned(self, session_key: str, ref: SandboxRef) -> SandboxRef | None:
        """``ref`` if ``session_key`` owns it, None if it is gone; OwnershipError otherwise."""
        if ref.provider != PROVIDER_NAME:
            raise OwnershipError(f"{ref} belongs to provider {ref.provider!r}")
        if ref.external_id != self.ownership.name(session_key):
            raise OwnershipError(f"{ref} does not belong to this session")
        labels = await asyncio.to_thread(_read_owner, self.base_dir / ref.external_id)
        if labels is None:
            return None  # gone: attach raises SandboxNotFound, find returns None
        self.ownership.check(labels, session_key, what=f"tinybox {ref.external_id}")
        return ref

    def _sandbox(self, external_id: str, spec: SandboxSpec) -> TinyboxSandbox:
        ref = SandboxRef(PROVIDER_NAME, external_id)
        box = self.base_dir / external_id
        return TinyboxSandbox(ref, box, spec, output_cap=self.output_cap, read_cap=self.read_cap)

    def _ensure(self, external_id: str, session_key: str) -> None:
        box = ensure_private_dir(self.base_dir, external_id, setting=SETTING)  # mkdir -p, 0700
        (box / WORKSPACE).mkdir(exist_ok=True)
        (box / RUNS).mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):  # the first create writes the record
            fd = os.open(box / OWNER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(fd, "w") as handle:
                json.dump(self.ownership.labels(session_key), handle)
        self.ownership.check(_read_owner(box), session_key, what=f"tinybox {external_id}")

    def _list(self) -> list[OwnedResource]:
        if not self.base_dir.is_dir():
            return []
        owned = []
        for box in sorted(self.base_dir.iterdir()):
            if box.name.startswith(NAME_PREFIX) and DELETING_MARK not in box.name:
                session_hash = self.ownership.owned_hash(_read_owner(box))
                if session_hash is not None:
                    owned.append(OwnedResource(SandboxRef(PROVIDER_NAME, box.name), session_hash))
        return owned


def _read_owner(box: Path) -> dict[str, object] | None:
    """The labels of the box's owner record; None if the box (or its record) is gone."""
    try:
        labels = json.loads((box / OWNER).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return labels if isinstance(labels, dict) else {}


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[TinyboxProvider]:
    """The offline conformance target: a fresh provider over ``scratch_dir / "boxes"``.

    Its namespace is derived from ``scratch_dir``: fixed for the run, new for the next.
    """
    namespace = derived_namespace("conformance", str(scratch_dir))
    yield TinyboxProvider(Path(scratch_dir) / "boxes", namespace=namespace)
