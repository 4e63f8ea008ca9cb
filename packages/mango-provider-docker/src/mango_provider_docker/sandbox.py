"""The client for one Docker sandbox: a container with ``/workspace``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from mango.provider import (
    Command,
    ExecResult,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
)
from mango.provider.execution import ExecTracker, StreamedExec
from mango.provider.files import file_bytes
from mango.provider.hostdirs import remove_dir
from mango.provider.output import ExecChannel
from mango.provider.reads import read_limit
from mango_provider_docker.engine import Engine
from mango_provider_docker.execution import ContainerNotRunning, run_command
from mango_provider_docker.files import (
    WORKSPACE_POLICY,
    open_workspace_file,
    read_workspace_file,
    write_workspace_file,
)
from mango_provider_docker.layout import WORKSPACE
from mango_provider_docker.network import begin_setup, end_setup

__all__ = ["DockerSandbox", "ensure_running"]


async def ensure_running(engine: Engine, container_id: str, inspect: dict[str, Any] | None) -> None:
    """Start or unpause the container if its inspect document says it is not running.

    ``inspect=None`` means "just created": start it. Raises
    :class:`SandboxNotFound` if the container is gone or being removed.
    """
    state = (inspect or {}).get("State") or {}
    if inspect is not None and state.get("Status") == "removing":
        raise SandboxNotFound(f"container {container_id} is being removed")
    if state.get("Paused"):
        await engine.unpause_container(container_id)
    elif not state.get("Running"):
        await engine.start_container(container_id)


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class DockerSandbox(StreamedExec):
    """One Docker sandbox, obtained from :class:`~mango_provider_docker.DockerProvider`.

    Commands (``exec``, ``exec_stream``) run inside the container's workspace
    (see :mod:`mango_provider_docker.execution`). The environment is the
    image's, with ``PATH`` and ``HOME=/workspace`` fixed, plus
    ``command.env``. ``command.cwd`` is created if missing; a symlink in it
    raises :class:`PathEscapeError`. A stopped or paused container is started
    again first; :class:`SandboxNotFound` if the container is gone.
    Files move through the archive API (see :mod:`mango_provider_docker.files`).
    Package setup has its own network when the spec has none
    (:mod:`mango_provider_docker.network`).
    The sandbox keeps the spec it was created or attached with; its
    ``timeout`` is the default for commands that give none.
    """

    _ref: SandboxRef
    _spec: SandboxSpec
    _host_dir: Path
    _engine: Engine = attrs.field(repr=False)
    _max_output_bytes: int
    _max_read_bytes: int
    _tracker: ExecTracker = attrs.field(repr=False)
    _background: set[asyncio.Task[Any]] = attrs.field(repr=False)

    @property
    def ref(self) -> SandboxRef:
        """``SandboxRef("docker", <full container id>)``."""
        return self._ref

    @property
    def root(self) -> str:
        """``/workspace``: the workspace root inside the container."""
        return WORKSPACE

    @property
    def spec(self) -> SandboxSpec:
        """The spec this client was created or attached with."""
        return self._spec

    @property
    def container_id(self) -> str:
        """The full id of the container."""
        return self._ref.external_id

    @property
    def host_dir(self) -> Path:
        """The provider-owned host directory of this sandbox (removed by destroy)."""
        return self._host_dir

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._tracker.track(self.container_id) as handle:
            for attempt in range(2):
                try:
                    return await run_command(
                        self._engine,
                        self.container_id,
                        command,
                        timeout=timeout,
                        channel=channel,
                        handle=handle,
                        background=self._background,
                    )
                except ContainerNotRunning:
                    if attempt:
                        break
                    await self._revive()
            raise ProviderUnavailable(f"container {self.container_id} stops as soon as it starts")

    async def _revive(self) -> None:
        inspect = await self._engine.inspect_container(self.container_id)
        if inspect is None:
            raise SandboxNotFound(f"container {self.container_id} no longer exists")
        await ensure_running(self._engine, self.container_id, inspect)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of the regular file ``path`` under ``WORKSPACE_POLICY``.

        At most ``max_bytes`` (default: the provider's read cap), checked
        before the transfer and while it runs (:class:`FileTooLarge`). Raises
        what :func:`mango_provider_docker.files.read_workspace_file` documents.
        """
        limit = read_limit(max_bytes, self._max_read_bytes)
        WORKSPACE_POLICY.locate(path)
        await asyncio.sleep(0)
        return await read_workspace_file(self._engine, self.container_id, path, limit)

    @asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream the regular file ``path`` from the archive API, whatever its size.

        The path is checked and the transfer opened on entry; leaving the
        block closes it. The same errors as :meth:`read_file` (no bound).
        """
        WORKSPACE_POLICY.locate(path)
        await asyncio.sleep(0)
        async with open_workspace_file(self._engine, self.container_id, path) as chunks:
            yield chunks

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data`` (mode 0644), creating parent directories.

        Never writes through a symlink (:class:`PathEscapeError`); a directory
        or other non-regular target raises :class:`PermanentError`.
        """
        WORKSPACE_POLICY.locate(path, write=True)
        payload = file_bytes(data)
        await asyncio.sleep(0)
        await write_workspace_file(self._engine, self.container_id, path, payload)

    async def begin_package_setup(self) -> None:
        """Connect a ``network="none"`` sandbox with packages to the bridge for its setup.

        A no-op for every other sandbox (``bridge`` has its network already).
        """
        await begin_setup(self._engine, self.container_id)

    async def end_package_setup(self) -> None:
        """Disconnect it again: afterwards it has loopback only, as its spec says."""
        await end_setup(self._engine, self.container_id)

    async def destroy(self) -> None:
        """Kill the container, remove the host directory, then the container (and its volumes).

        Idempotent; the same order as ``DockerProvider.destroy``. Commands
        still running, from this process or any other, get
        ``ExecResult(cancelled=True, exit_code=-1)``. After this, attach
        raises :class:`SandboxNotFound`.
        """
        await asyncio.sleep(0)
        self._tracker.mark_destroyed(self.container_id)
        await self._engine.kill_container(self.container_id)
        await asyncio.to_thread(remove_dir, self._host_dir)
        await self._engine.remove_container(self.container_id)
