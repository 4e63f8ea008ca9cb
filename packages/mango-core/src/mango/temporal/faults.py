"""Crash injection for recovery tests; nothing in production imports it.

:func:`inject_faults` wraps a provider and a store so that the process kills
itself with SIGKILL (no cleanup, no finally blocks: a real crash) the first
time it reaches a point. The recovery tests run ``mango`` through their own
entry point (``tests/faulty_mango.py`` of mango-core), which reads the point
from ``MANGO_FAULT_POINT`` (:func:`fault_point_from_env`) and hands
:func:`inject_faults` to :func:`mango.cli.main.main` as its ``wrap_ports``
seam, so ``mango worker`` and every direct command open their SessionManager
on the wrapped ports (:func:`mango.runtime.open_runtime`). The ``mango``
script itself reads no such variable. The points:

=========================  ==============================================================
provisioning
``after-intent``           the provisioning intent was stored; nothing was created yet
``after-create``           the provider created the resource; no binding yet
``after-setup``            setup finished (packages, network); the binding is about to be stored
``after-binding``          the binding was stored; the step did not run yet
deletion
``after-fence``            the Session was fenced; nothing was destroyed yet
``after-rename``           inside destroy: a provider directory was renamed to its
                           ``.deleting-`` leftover (the local session directory; Docker's
                           host directory, its container killed); nothing removed yet
``after-removal``          inside destroy: the leftovers were removed; the owner record
                           (local) or the stopped container (Docker) is still there
``during-destroy``         the provider's destroy (or purge) returned; binding and intent
                           still stored
``after-binding-removed``  the binding was removed; intent (if any) and Session row remain
``after-intent-removed``   the intent was removed; the Session row remains
resources
``during-import``          a File Resource's temporary file is complete (in the target's
                           directory), not yet renamed onto the target
``after-import-rename``    the copy is in place; its marker is not written yet
``after-output-upload``    an output's bytes are stored; its row is still ``uploading``
=========================  ==============================================================

The two points inside destroy are reached through
:func:`mango.provider.hostdirs.observe_removals`, the import points through
:func:`mango.provider.hostfiles.observe_imports` and the output point
through :func:`mango.app.outputs.observe_publications`, so they stop the
process between the real steps, not in a copy of them.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import sys
from collections.abc import AsyncIterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

from mango.app.outputs import PublicationStep, observe_publications
from mango.app.wrappers import SandboxWrapper
from mango.domain.capabilities import CapabilitySet
from mango.domain.errors import ConfigurationError
from mango.domain.ports import (
    BindingStore,
    FileResourceSandbox,
    Provider,
    PurgingProvider,
    Sandbox,
)
from mango.domain.resources import FileResourceMount
from mango.domain.values import (
    Binding,
    OwnedResource,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SessionRecord,
)
from mango.provider.hostdirs import RemovalStep, observe_removals
from mango.provider.hostfiles import ImportStep, observe_imports

__all__ = [
    "DELETION_POINTS",
    "FAULT_POINT_ENV",
    "RESOURCE_POINTS",
    "FaultPoint",
    "fault_point_from_env",
    "inject_faults",
]

FAULT_POINT_ENV = "MANGO_FAULT_POINT"
_LOG = logging.getLogger(__name__)


class FaultPoint(enum.StrEnum):
    """Where the worker crashes; see the module docstring."""

    AFTER_INTENT = "after-intent"
    AFTER_CREATE = "after-create"
    AFTER_SETUP = "after-setup"
    AFTER_BINDING = "after-binding"
    AFTER_FENCE = "after-fence"
    AFTER_RENAME = "after-rename"
    AFTER_REMOVAL = "after-removal"
    DURING_DESTROY = "during-destroy"
    AFTER_BINDING_REMOVED = "after-binding-removed"
    AFTER_INTENT_REMOVED = "after-intent-removed"
    DURING_IMPORT = "during-import"
    AFTER_IMPORT_RENAME = "after-import-rename"
    AFTER_OUTPUT_UPLOAD = "after-output-upload"


DELETION_POINTS = (
    FaultPoint.AFTER_FENCE,
    FaultPoint.AFTER_RENAME,
    FaultPoint.AFTER_REMOVAL,
    FaultPoint.DURING_DESTROY,
    FaultPoint.AFTER_BINDING_REMOVED,
    FaultPoint.AFTER_INTENT_REMOVED,
)
"""The points of a deletion, in the order a deletion reaches them."""

RESOURCE_POINTS = (
    FaultPoint.DURING_IMPORT,
    FaultPoint.AFTER_IMPORT_RENAME,
    FaultPoint.AFTER_OUTPUT_UPLOAD,
)
"""The points of a File Resource import and an output's publication."""


def fault_point_from_env(env: Mapping[str, str] | None = None) -> FaultPoint | None:
    """The configured fault point or None; an unknown value is a :class:`ConfigurationError`."""
    raw = (os.environ if env is None else env).get(FAULT_POINT_ENV, "").strip()
    if not raw:
        return None
    try:
        return FaultPoint(raw)
    except ValueError:
        known = ", ".join(point.value for point in FaultPoint)
        raise ConfigurationError(f"{FAULT_POINT_ENV}={raw!r} is not one of {known}") from None


def _crash(point: FaultPoint) -> NoReturn:
    message = f"mango fault injection: killing pid {os.getpid()} at {point.value}\n"
    sys.stderr.write(message)
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # pragma: no cover - SIGKILL does not return


@attrs.define
class _Sandbox(SandboxWrapper):
    point: FaultPoint

    async def destroy(self) -> None:
        await self.inner.destroy()
        if self.point is FaultPoint.DURING_DESTROY:
            _crash(self.point)


@attrs.define
class _ResourceSandbox(_Sandbox):
    """A sandbox with the resource protocols, delegated by name (a runtime protocol check
    does not look through ``__getattr__`` from Python 3.12)."""

    async def has_file_resource(self, mount: FileResourceMount) -> bool:
        return await self.inner.has_file_resource(mount)  # type: ignore[attr-defined, no-any-return]

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        await self.inner.import_file_resource(mount, chunks)  # type: ignore[attr-defined]

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        await self.inner.remove_file_resource(runtime_path, identity)  # type: ignore[attr-defined]

    def resource_lock(self, *, exclusive: bool = False) -> Any:
        return self.inner.resource_lock(exclusive=exclusive)  # type: ignore[attr-defined]

    def open_session_outputs(self) -> Any:
        return self.inner.open_session_outputs()  # type: ignore[attr-defined]


def _wrap(sandbox: Sandbox, point: FaultPoint) -> Sandbox:
    if isinstance(sandbox, FileResourceSandbox):
        return _ResourceSandbox(sandbox, point)
    return _Sandbox(sandbox, point)


@attrs.define
class _Provider:
    inner: Provider
    point: FaultPoint

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> CapabilitySet:
        return self.inner.capabilities

    async def create(self, session_key: str, spec: SandboxSpec) -> Sandbox:
        sandbox = await self.inner.create(session_key, spec)
        if self.point is FaultPoint.AFTER_CREATE:
            _crash(self.point)
        return _wrap(sandbox, self.point)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> Sandbox:
        return _wrap(await self.inner.attach(session_key, ref, spec), self.point)

    async def find(self, session_key: str) -> SandboxRef | None:
        return await self.inner.find(session_key)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        # SessionManager tears down through the provider, never through a client.
        await self.inner.destroy(session_key, ref)
        if self.point is FaultPoint.DURING_DESTROY:
            _crash(self.point)

    async def purge(self, session_key: str, *, force: bool = False) -> None:
        if isinstance(self.inner, PurgingProvider):
            await self.inner.purge(session_key, force=force)
            if self.point is FaultPoint.DURING_DESTROY:
                _crash(self.point)

    async def list_owned(self) -> Sequence[OwnedResource]:
        return await self.inner.list_owned()

    async def health(self) -> str:
        return await self.inner.health()

    async def aclose(self) -> None:
        await self.inner.aclose()


@attrs.define
class _Store:
    inner: BindingStore
    point: FaultPoint

    async def deployment_namespace(self) -> str:
        return await self.inner.deployment_namespace()

    async def ensure_session(self, session_id: str) -> SessionRecord:
        return await self.inner.ensure_session(session_id)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self.inner.get_session(session_id)

    async def list_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        return await self.inner.list_sessions(limit)

    async def fence_session(self, session_id: str) -> SessionRecord | None:
        fenced = await self.inner.fence_session(session_id)
        if self.point is FaultPoint.AFTER_FENCE:
            _crash(self.point)
        return fenced

    async def delete_session(self, session_id: str) -> bool:
        return await self.inner.delete_session(session_id)

    async def list_deleting_sessions(self, limit: int = 100) -> Sequence[SessionRecord]:
        return await self.inner.list_deleting_sessions(limit)

    async def get_intent(self, session_id: str) -> ProvisioningIntent | None:
        return await self.inner.get_intent(session_id)

    async def put_intent(self, intent: ProvisioningIntent) -> ProvisioningIntent:
        stored = await self.inner.put_intent(intent)
        if self.point is FaultPoint.AFTER_INTENT:
            _crash(self.point)
        return stored

    async def list_intents(self, provider: str, limit: int = 100) -> Sequence[ProvisioningIntent]:
        return await self.inner.list_intents(provider, limit)

    async def delete_intent(self, intent: ProvisioningIntent) -> None:
        await self.inner.delete_intent(intent)
        if self.point is FaultPoint.AFTER_INTENT_REMOVED:
            _crash(self.point)

    async def get_binding(self, session_id: str) -> Binding | None:
        return await self.inner.get_binding(session_id)

    async def put_binding(self, binding: Binding) -> Binding:
        if self.point is FaultPoint.AFTER_SETUP:
            _crash(self.point)
        winner = await self.inner.put_binding(binding)
        if self.point is FaultPoint.AFTER_BINDING:
            _crash(self.point)
        return winner

    async def delete_binding(self, binding: Binding) -> None:
        await self.inner.delete_binding(binding)
        if self.point is FaultPoint.AFTER_BINDING_REMOVED:
            _crash(self.point)

    async def mark_binding_lost(self, session_id: str, ref: SandboxRef) -> Binding | None:
        return await self.inner.mark_binding_lost(session_id, ref)

    async def reserve_slot(self, intent: ProvisioningIntent, limit: int | None) -> bool:
        return await self.inner.reserve_slot(intent, limit)

    async def live_sandboxes(self) -> int:
        return await self.inner.live_sandboxes()

    async def record_use(self, session_id: str, ref: SandboxRef) -> bool:
        return await self.inner.record_use(session_id, ref)

    async def list_idle(
        self, provider: str, idle_for: float, limit: int = 100
    ) -> Sequence[Binding]:
        return await self.inner.list_idle(provider, idle_for, limit)

    async def mark_evicted(
        self, session_id: str, ref: SandboxRef, idle_for: float
    ) -> Binding | None:
        return await self.inner.mark_evicted(session_id, ref, idle_for)

    async def finish_eviction(self, session_id: str, ref: SandboxRef) -> None:
        await self.inner.finish_eviction(session_id, ref)

    async def mark_paused(
        self, session_id: str, ref: SandboxRef, *, idle_for: float | None = None
    ) -> Binding | None:
        return await self.inner.mark_paused(session_id, ref, idle_for=idle_for)

    async def finish_pause(self, session_id: str, ref: SandboxRef) -> None:
        await self.inner.finish_pause(session_id, ref)

    async def clear_paused(self, session_id: str, ref: SandboxRef) -> None:
        await self.inner.clear_paused(session_id, ref)


def inject_faults(
    provider: Provider, store: BindingStore, point: FaultPoint | None
) -> tuple[Provider, BindingStore]:
    """Wrap ``provider`` and ``store`` so the process crashes at ``point``; unchanged if None."""
    if point is None:
        return provider, store
    _LOG.warning(
        "FAULT INJECTION ACTIVE (%s=%s): this process will SIGKILL itself; tests only",
        FAULT_POINT_ENV,
        point.value,
    )
    steps = {FaultPoint.AFTER_RENAME: "renamed", FaultPoint.AFTER_REMOVAL: "removed"}
    if point in steps:

        def observe(step: RemovalStep, _path: Path) -> None:
            if step == steps[point]:
                _crash(point)

        observe_removals(observe)
    imports: dict[FaultPoint, ImportStep] = {
        FaultPoint.DURING_IMPORT: "written",
        FaultPoint.AFTER_IMPORT_RENAME: "renamed",
    }
    if point in imports:

        def on_import(step: ImportStep, _target: Path) -> None:
            if step == imports[point]:
                _crash(point)

        observe_imports(on_import)
    if point is FaultPoint.AFTER_OUTPUT_UPLOAD:

        def on_publication(step: PublicationStep, _path: str) -> None:
            if step == "uploaded":
                _crash(point)

        observe_publications(on_publication)
    return _Provider(provider, point), _Store(store, point)
