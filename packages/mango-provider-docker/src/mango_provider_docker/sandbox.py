"""The client for one Docker sandbox: a container with ``/workspace`` and its resource mounts."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from mango.provider import (
    OUTPUTS_ROOT,
    SKILLS_ROOT,
    UPLOADS_ROOT,
    Command,
    ExecFileSystem,
    ExecResult,
    ExposedPort,
    ExtraRoot,
    FileResourceMount,
    MangoError,
    MemoryFile,
    MemorySnapshot,
    MemoryStoreMount,
    PathPolicy,
    PermanentError,
    ProcessHandle,
    ProcessInfo,
    ProcessOutput,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    SkillMount,
    check_port,
)
from mango.provider.execution import ExecTracker, StreamedExec, torn_down
from mango.provider.files import checked_chunks, file_bytes, staging_name
from mango.provider.hostdirs import remove_dir
from mango.provider.hostfiles import HostFileResources
from mango.provider.hostmemory import HostMemoryStores
from mango.provider.hostskills import HostSkillBundles
from mango.provider.locks import try_exclusive_lock_async
from mango.provider.output import ExecChannel
from mango.provider.reads import read_limit
from mango.provider.steps import StepKey, StepRecords, exec_once
from mango_provider_docker.engine import Engine
from mango_provider_docker.execution import ContainerNotRunning, run_command
from mango_provider_docker.files import (
    MOUNTS_POLICY,
    PRE_SKILLS_POLICY,
    WORKSPACE_POLICY,
    container_stat,
    open_workspace_file,
    read_workspace_file,
    spool_chunks,
    upload_spooled,
    write_workspace_file,
)
from mango_provider_docker.layout import WORKSPACE
from mango_provider_docker.mounts import (
    FILES_DIR,
    MEMORY_DIR,
    SKILLS_DIR,
    STATE_DIR,
    MountState,
    predates,
)
from mango_provider_docker.network import begin_setup, end_setup
from mango_provider_docker.processes import ContainerProcesses

__all__ = ["STEPS_ROOT", "DockerSandbox", "ensure_running"]

STEPS_ROOT = "/tmp/.mango-steps"  # noqa: S108 - in the container, provider-owned
"""Where a container keeps its step records (:mod:`mango.provider.steps`)."""

_PORTS_KEY = "NetworkSettings"


def published_port(inspect: Mapping[str, Any], port: int) -> str | None:
    """The host port the Engine bound ``port``/tcp to on 127.0.0.1, if any."""
    settings = inspect.get(_PORTS_KEY)
    ports = settings.get("Ports") if isinstance(settings, Mapping) else None
    bindings = ports.get(f"{port}/tcp") if isinstance(ports, Mapping) else None
    for binding in bindings or ():
        if isinstance(binding, Mapping) and binding.get("HostIp") == "127.0.0.1":
            host_port = binding.get("HostPort")
            if isinstance(host_port, str) and host_port.isdigit():
                return host_port
    return None


async def ensure_running(
    engine: Engine, container_id: str, inspect: dict[str, Any] | None, *, unpause: bool = True
) -> None:
    """Start (or unpause) the container if its inspect document says it is not running.

    ``inspect=None`` means "just created": start it. With ``unpause=False`` a
    paused container stays paused (attach: a pause is mango's to undo,
    through ``resume``). Raises :class:`SandboxNotFound` if the container is
    gone or being removed.
    """
    state = (inspect or {}).get("State") or {}
    if inspect is not None and state.get("Status") == "removing":
        raise SandboxNotFound(f"container {container_id} is being removed")
    if state.get("Paused"):
        if unpause:
            await engine.unpause_container(container_id)
    elif not state.get("Running"):
        await engine.start_container(container_id)


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class DockerSandbox(StreamedExec, ExecFileSystem):
    """One Docker sandbox, obtained from :class:`~mango_provider_docker.DockerProvider`.

    Commands (``exec``, ``exec_stream``) run inside the container's workspace
    (see :mod:`mango_provider_docker.execution`). The environment is the
    image's, with ``PATH`` and ``HOME=/workspace`` fixed, plus
    ``command.env``. ``command.cwd`` is created if missing; a symlink in it
    raises :class:`PathEscapeError`. A stopped or paused container is started
    (or resumed) again by ``exec`` first, but attach leaves a paused one
    paused; :class:`SandboxNotFound` if the container is gone. It pauses with
    the Engine's pause (the cgroup freezer: every process stops, memory and
    workspace stay) and exposes ports published on 127.0.0.1 at creation
    (``MANGO_SANDBOX_PORTS``).
    Files move through the archive API (see :mod:`mango_provider_docker.files`).
    The file API (``list_dir``, ``stat``, ``exists``, ``remove``, ``rename``,
    ``make_dir``) is the provider kit's :class:`~mango.provider.ExecFileSystem`:
    one busybox command per operation through ``exec``, as root in the container.
    Package setup has its own network when the spec has none
    (:mod:`mango_provider_docker.network`).
    The sandbox keeps the spec it was created or attached with; its
    ``timeout`` is the default for commands that give none.

    With its resource mounts (every container made today: ``mounts``), it is
    a ``FileResourceSandbox``, a ``SessionOutputSandbox``, a
    ``SkillBundleSandbox``, a ``MemoryStoreSandbox`` (for the Memory Stores its
    spec had when it was created) and a ``ResourceLockSandbox`` (see
    :mod:`mango_provider_docker.mounts`), and its file tools also take
    absolute paths below ``/mnt/session/uploads`` (read only) and
    ``/mnt/session/outputs``; ``skills/`` in the workspace is the read-only
    skills mount. A container older than a mount fails its operations
    closed with a :class:`PermanentError`.
    """

    _ref: SandboxRef
    _spec: SandboxSpec
    _host_dir: Path
    _engine: Engine = attrs.field(repr=False)
    _max_output_bytes: int
    _max_read_bytes: int
    _max_process_log_bytes: int
    _tracker: ExecTracker = attrs.field(repr=False)
    _background: set[asyncio.Task[Any]] = attrs.field(repr=False)
    _mounts: MountState = attrs.field(factory=MountState)

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
    def step_records(self) -> StepRecords:
        """``/tmp/.mango-steps`` in the container (:mod:`mango.provider.steps`)."""
        return StepRecords(STEPS_ROOT, self._max_output_bytes)

    async def exec_step(
        self, key: StepKey, command: Command, *, timeout: float | None
    ) -> ExecResult:
        """Run ``command`` once for ``key`` (:class:`~mango.domain.ports.StepSandbox`)."""
        return await exec_once(self, self.step_records, key, command, timeout=timeout)

    @property
    def container_id(self) -> str:
        """The full id of the container."""
        return self._ref.external_id

    @property
    def host_dir(self) -> Path:
        """The provider-owned host directory of this sandbox (removed by destroy)."""
        return self._host_dir

    @property
    def mounts(self) -> MountState:
        """Which resource mounts the container has (none: it predates them)."""
        return self._mounts

    @property
    def _policy(self) -> PathPolicy:
        if not self._mounts.outputs:
            return WORKSPACE_POLICY
        if not self._mounts.skills:
            return PRE_SKILLS_POLICY
        memory = [m for m in self._spec.memory_stores if m.runtime_path in self._mounts.memory]
        if not memory:
            return MOUNTS_POLICY
        # Each Memory Store is a root of its own: writable iff attached read_write.
        return attrs.evolve(
            MOUNTS_POLICY,
            extra_roots=(
                *MOUNTS_POLICY.extra_roots,
                *(ExtraRoot(m.runtime_path, writable=not m.read_only) for m in memory),
            ),
        )

    @property
    def _resources(self) -> HostFileResources:
        return HostFileResources(self._host_dir / FILES_DIR, self._host_dir / STATE_DIR)

    @property
    def _skills(self) -> HostSkillBundles:
        return HostSkillBundles(self._host_dir / SKILLS_DIR, self._host_dir / STATE_DIR)

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
        # A command asked of a paused container resumes it, as E2B's connect does.
        await ensure_running(self._engine, self.container_id, await self._inspect())

    async def _inspect(self) -> dict[str, Any]:
        inspect = await self._engine.inspect_container(self.container_id)
        if inspect is None or (inspect.get("State") or {}).get("Status") == "removing":
            raise SandboxNotFound(f"container {self.container_id} no longer exists")
        return inspect

    # ------------------------------------------------------------------ pause and ports

    async def pause(self) -> None:
        """Freeze every process of the container (Engine pause); idempotent.

        A stopped container is started first, so a paused one always holds
        its processes' memory. :class:`SandboxNotFound` if it is gone.
        """
        inspect = await self._inspect()
        state = inspect.get("State") or {}
        if state.get("Paused"):
            return
        await ensure_running(self._engine, self.container_id, inspect)
        try:
            await self._engine.pause_container(self.container_id)
        except ProviderUnavailable:
            if not await self.is_paused():  # another worker's pause won the race
                raise

    async def resume(self) -> None:
        """Thaw the container (Engine unpause; a stopped one is started); idempotent."""
        inspect = await self._inspect()
        try:
            await ensure_running(self._engine, self.container_id, inspect)
        except ProviderUnavailable:
            if await self.is_paused():
                raise

    async def is_paused(self) -> bool:
        """The Engine's word: is the container paused now?"""
        return bool(((await self._inspect()).get("State") or {}).get("Paused"))

    async def expose_port(self, port: int) -> ExposedPort:
        """``http://127.0.0.1:<host port>``: the Engine's binding of ``port`` on 127.0.0.1.

        Docker publishes ports only when it creates a container, so only the
        ports of ``MANGO_SANDBOX_PORTS`` in a ``bridge``-network sandbox have
        one; any other is a :class:`PermanentError` saying so.
        """
        check_port(port)
        inspect = await self._inspect()
        binding = published_port(inspect, port)
        if binding is None:
            raise PermanentError(
                f"port {port} of container {self.container_id[:12]} is not published",
                hint="Docker publishes ports when it creates a container: set "
                f"MANGO_SANDBOX_PORTS to include {port} and use network 'bridge' for "
                "a new Session",
            )
        return ExposedPort(f"http://127.0.0.1:{binding}")

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of the regular file ``path`` under ``WORKSPACE_POLICY``.

        At most ``max_bytes`` (default: the provider's read cap), checked
        before the transfer and while it runs (:class:`FileTooLarge`). Raises
        what :func:`mango_provider_docker.files.read_workspace_file` documents.
        """
        limit = read_limit(max_bytes, self._max_read_bytes)
        self._policy.locate(path)
        await asyncio.sleep(0)
        return await read_workspace_file(
            self._engine, self.container_id, path, limit, policy=self._policy
        )

    @asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream the regular file ``path`` from the archive API, whatever its size.

        The path is checked and the transfer opened on entry; leaving the
        block closes it. The same errors as :meth:`read_file` (no bound).
        """
        self._policy.locate(path)
        await asyncio.sleep(0)
        async with open_workspace_file(
            self._engine, self.container_id, path, policy=self._policy
        ) as chunks:
            yield chunks

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data`` (mode 0644), creating parent directories.

        Never writes through a symlink (:class:`PathEscapeError`); a directory
        or other non-regular target raises :class:`PermanentError`.
        """
        self._policy.locate(path, write=True)
        payload = file_bytes(data)
        await asyncio.sleep(0)
        await write_workspace_file(
            self._engine, self.container_id, path, payload, policy=self._policy
        )

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Create or replace ``path`` with what ``chunks`` yields, atomically (memory O(chunk)).

        The checks of :meth:`write_file` first; the chunks are spooled to an
        unlinked host file (a tar member's size comes before its bytes), the
        archive streamed from it with the file under a temporary name beside
        ``path``, which one ``mv -f -T`` in the container renames over
        ``path`` (see :mod:`mango_provider_docker.files`). A failure midway,
        cancellation included, removes the temporary: the old file stays.
        """
        self._policy.locate(path, write=True)
        await asyncio.sleep(0)
        resolved = await self._policy.resolve_write(
            path, container_stat(self._engine, self.container_id)
        )
        temporary = staging_name(resolved.location.parts[-1])
        with tempfile.TemporaryFile(prefix="mango-write-") as spool:
            size = await spool_chunks(checked_chunks(chunks), spool)
            try:
                await upload_spooled(
                    self._engine,
                    self.container_id,
                    resolved,
                    temporary=temporary,
                    spool=spool,
                    size=size,
                )
                await self._replace_file(path, resolved.location, temporary)
            except BaseException:
                # Shielded: a write cancelled (again) while it cleans up still removes it.
                with contextlib.suppress(MangoError):
                    await asyncio.shield(self._remove_file(path, resolved.location, temporary))
                raise

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

    # ------------------------------------------------------------------ background processes

    @property
    def _processes(self) -> ContainerProcesses:
        return ContainerProcesses(
            self.exec,
            log_cap=self._max_process_log_bytes,
            output_cap=self._max_output_bytes,
            gone=self._gone,
        )

    async def _gone(self) -> bool:
        """After a failed exec: True if the container is gone, being removed, or was killed.

        Asked again for a while (the kit's :func:`torn_down`): the runtime refuses
        an exec ("cannot exec in a stopped state") a moment before the daemon
        shows the container stopped, and a background-process call that met a
        destroy must say so, not report an outage.
        """

        async def stopped() -> bool:
            inspect = await self._engine.inspect_container(self.container_id)
            state = (inspect or {}).get("State") or {}
            return (
                inspect is None
                or state.get("Status") in ("removing", "dead")
                or (not state.get("Running") and not state.get("Paused"))
            )

        return await torn_down(stopped)

    async def start(self, command: Command) -> ProcessHandle:
        """Start ``command`` under a supervisor in the container (see :mod:`.processes`).

        Environment and working directory as for :meth:`exec`; the process
        runs until it exits, is killed, or the container goes.
        """
        return await self._processes.start(command)

    async def processes(self) -> list[ProcessInfo]:
        """Every background process of the container, oldest first, from any worker."""
        return await self._processes.processes()

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        """The log from byte ``since``; at most ``max_bytes`` and the exec output cap per call."""
        return await self._processes.logs(process_id, since, max_bytes)

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        """Wait for the end or ``timeout`` (then the answer is RUNNING)."""
        return await self._processes.wait(process_id, timeout)

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """Write ``data`` to the process's stdin."""
        await self._processes.send_stdin(process_id, data)

    async def kill(self, process_id: str) -> ProcessInfo:
        """Kill the process's group and tree; idempotent for an ended process."""
        return await self._processes.kill(process_id)

    # ------------------------------------------------------------------ resources

    async def _host_side(self) -> HostFileResources:
        """The host side of the mounts; :class:`SandboxNotFound` once the sandbox is gone."""
        resources = self._resources
        if not await asyncio.to_thread(resources.state_root.is_dir):
            if await self._engine.inspect_container(self.container_id) is None:
                raise SandboxNotFound(f"container {self.container_id} no longer exists")
            raise ProviderUnavailable(
                f"the host directory {self._host_dir} of container {self.container_id[:12]} "
                "is missing (is MANGO_SANDBOX_RESOURCE_DIR on the Docker Engine's host?)"
            )
        return resources

    @asynccontextmanager
    async def resource_lock(self, *, exclusive: bool = False) -> AsyncIterator[None]:
        """Hold the sandbox's resource lock (``<host dir>/state/.lock``) for the block."""
        if not (self._mounts.uploads or self._mounts.outputs or self._mounts.skills):
            raise predates("resource mounts", self.container_id)
        resources = await self._host_side()
        async with resources.lock(exclusive=exclusive):
            yield

    async def has_file_resource(self, mount: FileResourceMount) -> bool:
        """Whether ``mount``'s read-only copy is in place (False without the uploads mount)."""
        if not self._mounts.uploads:
            return False
        return await (await self._host_side()).has(mount)

    async def import_file_resource(
        self, mount: FileResourceMount, chunks: AsyncIterable[bytes]
    ) -> None:
        """Copy ``chunks`` to ``mount.runtime_path``, all or nothing, read-only (see the kit)."""
        if not self._mounts.uploads:
            raise predates(f"uploads mount ({UPLOADS_ROOT})", self.container_id)
        await (await self._host_side()).import_(mount, chunks)

    async def remove_file_resource(self, runtime_path: str, identity: str) -> None:
        """Remove ``identity``'s copy at ``runtime_path``; idempotent (nothing to do without
        the uploads mount, or once the sandbox is gone)."""
        if not self._mounts.uploads:
            return
        try:
            resources = await self._host_side()
        except SandboxNotFound:
            return
        await resources.remove(runtime_path, identity)

    async def has_skill_bundles(self, mounts: Sequence[SkillMount]) -> Sequence[bool]:
        """Whether each mount's complete, read-only tree is in place (False without the mount).

        One thread hop for all of them (see the kit).
        """
        if not self._mounts.skills:
            return [False] * len(mounts)
        # No host directory answers False; the import that follows says why.
        return await self._skills.has_all(mounts)

    async def import_skill_bundle(self, mount: SkillMount, chunks: AsyncIterable[bytes]) -> None:
        """Verify, extract and publish ``mount``'s archive at its runtime path (see the kit)."""
        if not self._mounts.skills:
            raise predates(f"skills mount ({SKILLS_ROOT})", self.container_id)
        await self._host_side()
        await self._skills.import_(mount, chunks)

    @asynccontextmanager
    async def open_session_outputs(self) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``/mnt/session/outputs`` as the Engine's own tar archive (entries as they are).

        Hold the resource lock around it. A container older than the
        outputs mount raises :class:`PermanentError`, never an empty archive.
        """
        if not self._mounts.outputs:
            raise predates(f"outputs mount ({OUTPUTS_ROOT})", self.container_id)
        async with self._engine.open_archive(self.container_id, OUTPUTS_ROOT + "/.") as chunks:
            if chunks is None:
                if await self._engine.inspect_container(self.container_id) is None:
                    raise SandboxNotFound(f"container {self.container_id} no longer exists")
                raise ProviderUnavailable(
                    f"{OUTPUTS_ROOT} is missing in container {self.container_id[:12]}"
                )
            yield chunks

    # ------------------------------------------------------------------ memory stores

    @property
    def _memory(self) -> HostMemoryStores:
        return HostMemoryStores(self._host_dir / MEMORY_DIR, self._host_dir / STATE_DIR)

    @asynccontextmanager
    async def memory_sync_lock(self, *, wait: bool) -> AsyncIterator[bool]:
        """The resource lock, exclusive; ``wait=False`` tries once (see the protocol)."""
        if not (self._mounts.uploads or self._mounts.outputs):
            raise predates("resource mounts", self.container_id)
        resources = await self._host_side()
        if wait:
            async with resources.lock(exclusive=True):
                yield True
            return
        async with try_exclusive_lock_async(resources.state_root / ".lock") as held:
            yield held

    async def _memory_side(self, mount: MemoryStoreMount) -> HostMemoryStores:
        if mount.runtime_path not in self._mounts.memory:
            raise predates(f"Memory Store mount ({mount.runtime_path})", self.container_id)
        await self._host_side()
        return self._memory

    async def read_memory_store(self, mount: MemoryStoreMount) -> MemorySnapshot:
        """The mount's baseline and files (the caller holds ``memory_sync_lock``)."""
        return await (await self._memory_side(mount)).read(mount)

    async def replace_memory_store(
        self, mount: MemoryStoreMount, files: Sequence[MemoryFile]
    ) -> None:
        """Make the mount hold ``files``, the new baseline (the caller holds the lock)."""
        await (await self._memory_side(mount)).replace(mount, files)
