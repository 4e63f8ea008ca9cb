"""The Docker provider: one container per Session key on a Docker Engine."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_PROCESS_LOG_BYTES,
    DEFAULT_MAX_READ_BYTES,
    CapabilitySet,
    InvalidInput,
    OwnedResource,
    OwnershipError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    admit,
    positive_int,
    validate_session_id,
)
from mango.provider.execution import ExecTracker
from mango.provider.hostdirs import remove_dir
from mango.provider.ownership import NAME_PREFIX, Ownership, listed_time, namespace_field
from mango_provider_docker.container import (
    Limits,
    check_extra_labels,
    check_publish_ports,
    container_config,
    default_limits,
    resolve_limits,
)
from mango_provider_docker.engine import Engine
from mango_provider_docker.layout import (
    CAPABILITIES,
    CONTAINER_ID,
    DEFAULT_CPUS,
    DEFAULT_IMAGE,
    DEFAULT_MEMORY,
    DEFAULT_PIDS_LIMIT,
    PROVIDER_NAME,
    check_container_id,
    container_labels,
    ensure_host_dir,
    host_dir,
    verify_ownership,
)
from mango_provider_docker.lifecycle import (
    CONFLICT_WAIT_SECONDS,
    adopt,
    await_winner,
    ensure_image,
    start_new,
)
from mango_provider_docker.mounts import MountState, ensure_mount_dirs
from mango_provider_docker.network import enforce
from mango_provider_docker.sandbox import DockerSandbox, ensure_running

__all__ = [
    "CAPABILITIES",
    "CLOSE_WAIT_SECONDS",
    "CONFLICT_WAIT_SECONDS",
    "DEFAULT_CPUS",
    "DEFAULT_IMAGE",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MEMORY",
    "DEFAULT_PIDS_LIMIT",
    "DockerProvider",
]

log = logging.getLogger(__name__)

CLOSE_WAIT_SECONDS = 30.0
"""How long ``aclose`` waits for the kills of cancelled commands to finish."""


def _as_path(value: str | os.PathLike[str]) -> Path:
    # Absolute now, so a later chdir of the worker cannot move the directories.
    return Path(value).absolute()


def _check_spec(spec: object) -> SandboxSpec:
    if not isinstance(spec, SandboxSpec):
        raise InvalidInput(f"expected a SandboxSpec, got {type(spec).__name__}")
    return spec


@attrs.define(eq=False)
class DockerProvider:
    """Sandboxes as containers on one Docker Engine.

    ``create`` is create-if-absent by a container name derived from the
    Session key, so a fresh instance (a restarted worker) finds what an
    earlier one made; ``attach`` inspects the referenced container, checks its
    ownership labels and starts it if it was stopped. Construction is cheap
    and does no I/O: the Engine is contacted on first use. Names and labels
    carry ``namespace`` (the deployment's), so deployments sharing a daemon
    never see, attach to or remove each other's containers.
    """

    resource_dir: Path = attrs.field(converter=_as_path)
    """Provider-owned host directory; one ``session-<hash>`` directory per sandbox below it."""
    image: str = attrs.field(default=DEFAULT_IMAGE, kw_only=True)
    """Image of sandboxes whose spec names none."""
    host: str | None = attrs.field(default=None, kw_only=True)
    """Docker host URL (``DOCKER_HOST``); ``None`` lets aiodocker find the daemon."""
    api_version: str | None = attrs.field(default=None, kw_only=True)
    """Pinned Engine API version (``DOCKER_API_VERSION``); ``None`` negotiates it."""
    memory: str = attrs.field(default=DEFAULT_MEMORY, kw_only=True)
    """Default memory limit (``0``: none)."""
    cpus: float = attrs.field(default=DEFAULT_CPUS, kw_only=True)
    """Default CPU limit (``0``: none)."""
    pids_limit: int = attrs.field(default=DEFAULT_PIDS_LIMIT, kw_only=True)
    """Default pids limit (``0``: none)."""
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
    pull_missing_images: bool = attrs.field(default=True, kw_only=True)
    """Pull an image that is not present; when False, a missing image is a configuration error."""
    progress: Callable[[str], None] | None = attrs.field(default=None, kw_only=True, repr=False)
    """Receives image pull progress lines (default: the ``mango_provider_docker`` logger)."""
    extra_labels: dict[str, str] = attrs.field(
        factory=dict, kw_only=True, converter=check_extra_labels
    )
    """More labels for every container (for example to find a test run's containers)."""
    publish_ports: tuple[int, ...] = attrs.field(
        default=(), kw_only=True, converter=check_publish_ports
    )
    """Container ports every ``bridge``-network sandbox publishes on 127.0.0.1, each on an
    ephemeral host port (``MANGO_SANDBOX_PORTS``), for ``expose_port``."""
    namespace: str = namespace_field()
    """The deployment namespace every container name and label set carries."""
    _defaults: Limits = attrs.field(init=False)
    _engine: Engine = attrs.field(init=False, repr=False)
    _tracker: ExecTracker = attrs.field(factory=ExecTracker, init=False, repr=False)
    _background: set[asyncio.Task[Any]] = attrs.field(factory=set, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._defaults = default_limits(self.memory, self.cpus, self.pids_limit)
        self._engine = Engine(self.host, self.api_version)

    @property
    def name(self) -> str:
        """Always ``docker``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """``package-setup`` (through ``exec``), ``file-resources``, ``session-outputs``
        and ``skill-bundles`` (see :mod:`mango_provider_docker.mounts`), ``file-api``
        (through ``exec``), ``background-processes`` (a supervisor in the container),
        ``pause`` (Engine pause) and ``exposed-ports`` (published on 127.0.0.1 at creation)."""
        return CAPABILITIES

    @property
    def ownership(self) -> Ownership:
        """Labels and names of this provider in its namespace."""
        return Ownership(PROVIDER_NAME, self.namespace)

    @property
    def engine(self) -> Engine:
        """The Engine client this provider uses."""
        return self._engine

    async def ping(self) -> str:
        """Contact the Engine (negotiating the API version); return the API version in use.

        Raises :class:`ProviderUnavailable` if the daemon cannot be reached.
        """
        docker = await self._engine.client()
        return str(docker.api_version)

    def _sandbox(
        self,
        session_key: str,
        container_id: str,
        spec: SandboxSpec,
        mounts: MountState | None = None,
    ) -> DockerSandbox:
        return DockerSandbox(
            ref=SandboxRef(PROVIDER_NAME, container_id),
            spec=spec,
            host_dir=host_dir(self.resource_dir, self.ownership, session_key),
            engine=self._engine,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
            max_process_log_bytes=self.max_process_log_bytes,
            tracker=self._tracker,
            background=self._background,
            mounts=mounts if mounts is not None else MountState(),
        )

    async def create(self, session_key: str, spec: SandboxSpec) -> DockerSandbox:
        """Create-if-absent the container of ``session_key``; idempotent.

        A name conflict (another worker won the race) resolves to the existing
        container after checking its labels and configuration; a container with
        that name that mango does not own, or did not configure so for
        ``spec``, raises :class:`OwnershipError`. Raises
        :class:`InvalidInput` for an invalid key or limit, and
        :class:`CapabilityNotSupported` for limited network.
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        admit(PROVIDER_NAME, self.capabilities, spec)
        limits = resolve_limits(spec, self._defaults)
        await asyncio.sleep(0)  # a task cancelled before the call creates nothing
        ownership = self.ownership
        name = ownership.name(key)
        inspect = await self._engine.inspect_container(name)
        if inspect is not None and (inspect.get("State") or {}).get("Status") == "removing":
            # A destroy is under way: let it finish, then create afresh.
            verify_ownership(inspect, ownership, key)
            await self._engine.remove_container(str(inspect["Id"]))
            inspect = None
        if inspect is None:
            image = spec.image or self.image
            await ensure_image(
                self._engine, image, pull=self.pull_missing_images, progress=self.progress
            )
            made = await asyncio.to_thread(ensure_host_dir, self.resource_dir, ownership, key)
            await asyncio.to_thread(ensure_mount_dirs, made)
            config = container_config(
                image=image,
                spec=spec,
                limits=limits,
                labels={**self.extra_labels, **ownership.labels(key)},
                host_dir=made,
                ports=self.publish_ports,
            )
            created = await self._engine.create_container(name, config)
            if created is not None:
                await start_new(self._engine, created)
                return self._sandbox(key, created, spec)
            inspect = await await_winner(self._engine, name)
        container_id, mounts = adopt(
            inspect, self.ownership, key, spec, self._defaults, host_dir=self._host_dir(key)
        )
        await ensure_running(self._engine, container_id, inspect)
        return self._sandbox(key, container_id, spec, mounts)

    def _host_dir(self, session_key: str) -> Path:
        return host_dir(self.resource_dir, self.ownership, session_key)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> DockerSandbox:
        """Rebuild a client for ``ref`` after checking it belongs to ``session_key``.

        Starts the container if it is stopped, as after a daemon restart
        without live-restore; a paused one stays paused (``resume`` undoes
        it). Raises :class:`OwnershipError` if
        ``ref`` names another provider or the container another Session key or
        no mango container at all, or if its configuration is not one mango
        creates for ``spec`` (labels can be forged), :class:`InvalidInput` if the reference is
        not a container id, and :class:`SandboxNotFound` if the container is
        gone (nothing is recreated).
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        container_id = check_container_id(self.ownership.check_ref(ref).external_id)
        await asyncio.sleep(0)
        inspect = await self._engine.inspect_container(container_id)
        if inspect is None or inspect.get("Id") != container_id:
            raise SandboxNotFound(f"docker container {container_id} no longer exists")
        _, mounts = adopt(
            inspect, self.ownership, key, spec, self._defaults, host_dir=self._host_dir(key)
        )
        # A paused container stays paused: its pause is undone by resume only.
        await ensure_running(self._engine, container_id, inspect, unpause=False)
        # A bound sandbox never keeps its setup network, whoever connected it.
        await enforce(self._engine, container_id, inspect)
        return self._sandbox(key, container_id, spec, mounts)

    async def _owned_container(self, session_key: str, ref: SandboxRef) -> str:
        """The container id of ``ref``, checked to be ``session_key``'s (not its spec)."""
        key = validate_session_id(session_key)
        container_id = check_container_id(self.ownership.check_ref(ref).external_id)
        inspect = await self._engine.inspect_container(container_id)
        if inspect is None or inspect.get("Id") != container_id:
            raise SandboxNotFound(f"docker container {container_id} no longer exists")
        verify_ownership(inspect, self.ownership, key)
        return container_id

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        """Pause ``ref``'s container by reference (ownership checked, no spec); idempotent."""
        container_id = await self._owned_container(session_key, ref)
        await self._sandbox(session_key, container_id, SandboxSpec()).pause()

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        """Resume ``ref``'s container by reference (ownership checked, no spec); idempotent."""
        container_id = await self._owned_container(session_key, ref)
        await self._sandbox(session_key, container_id, SandboxSpec()).resume()

    async def find(self, session_key: str) -> SandboxRef | None:
        """The reference of ``session_key``'s container in this namespace, or None. Read-only.

        Raises :class:`OwnershipError` if a container with its name is not
        owned by this key and namespace.
        """
        key = validate_session_id(session_key)
        inspect = await self._engine.inspect_container(self.ownership.name(key))
        if inspect is None:
            return None
        return SandboxRef(PROVIDER_NAME, verify_ownership(inspect, self.ownership, key))

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Remove ``ref``'s container and its host directory without attaching; idempotent.

        The container's labels and name are checked first (never anything
        inside it): :class:`OwnershipError` for another Session's or another
        deployment's container. A container already gone is success. The
        order keeps the container (whose labels are the ownership record)
        until last: kill it (every command in it stops, whichever process
        started it), remove the host directory (rename, then delete), remove
        the container; a crash at any step leaves something the next destroy,
        purge or reconcile finds and finishes.
        """
        key = validate_session_id(session_key)
        container_id = check_container_id(self.ownership.check_ref(ref).external_id)
        await asyncio.sleep(0)
        inspect = await self._engine.inspect_container(container_id)
        if inspect is not None and inspect.get("Id") == container_id:
            verify_ownership(inspect, self.ownership, key)
            await self._remove(key, container_id)
        elif not await self._newer_container(key):
            # ``ref`` gone and no newer container of the key: its host
            # directory (named by the key) has no other owner.
            await asyncio.to_thread(remove_dir, host_dir(self.resource_dir, self.ownership, key))

    async def purge(self, session_key: str, *, force: bool = False) -> None:
        """Remove the key's container (found by its name) and host directory; idempotent.

        A container under the key's name must carry this key's labels in this
        namespace (:class:`OwnershipError` otherwise; with ``force`` it is left
        alone, as someone else's, and only the host directory goes). Labels
        cannot be changed from inside a container, so nothing the sandbox
        does can make its own container look foreign.
        """
        key = validate_session_id(session_key)
        await asyncio.sleep(0)
        inspect = await self._engine.inspect_container(self.ownership.name(key))
        if inspect is not None:
            try:
                container_id = verify_ownership(inspect, self.ownership, key)
            except OwnershipError:
                if not force:
                    raise
                log.warning("forced purge of %s leaves a container it does not own", key)
            else:
                await self._remove(key, container_id)
                return
        await asyncio.to_thread(remove_dir, host_dir(self.resource_dir, self.ownership, key))

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Remove a listed container and its host directory by its labels (``mango gc``).

        The container is inspected again: it must carry the managed label,
        this namespace and ``resource.session_hash``, and a deterministic
        name (:class:`OwnershipError` otherwise). A container already gone is
        success. The same order as :meth:`destroy`.
        """
        container_id = check_container_id(self.ownership.check_ref(resource.ref).external_id)
        await asyncio.sleep(0)
        inspect = await self._engine.inspect_container(container_id)
        if inspect is None or inspect.get("Id") != container_id:
            return
        name = str(inspect.get("Name", "")).lstrip("/")
        what = f"docker container {name or container_id}"
        self.ownership.check_hash(container_labels(inspect), resource.session_hash, what=what)
        if len(name) != len(NAME_PREFIX) + 32 or not name.startswith(NAME_PREFIX):
            raise OwnershipError(f"refusing to use {what}: it does not carry a mango name")
        await self._remove_named(name, container_id)

    async def _remove(self, key: str, container_id: str) -> None:
        await self._remove_named(self.ownership.name(key), container_id)

    async def _remove_named(self, name: str, container_id: str) -> None:
        self._tracker.mark_destroyed(container_id)
        await self._engine.kill_container(container_id)
        await asyncio.to_thread(remove_dir, self.resource_dir / name)
        await self._engine.remove_container(container_id)

    async def _newer_container(self, session_key: str) -> bool:
        try:
            return await self.find(session_key) is not None
        except OwnershipError:
            return False  # a squatter on the name: not ours, and no claim on our directory

    async def list_owned(self) -> list[OwnedResource]:
        """Every container of this namespace, running or not (a label filter on the daemon)."""
        ownership = self.ownership
        owned = []
        for item in await self._engine.list_containers(ownership.selector()):
            container_id = str(item.get("Id", ""))
            session_hash = ownership.owned_hash(container_labels(item))
            if session_hash is not None and CONTAINER_ID.match(container_id):
                ref = SandboxRef(PROVIDER_NAME, container_id)
                owned.append(
                    OwnedResource(ref, session_hash, created_at=listed_time(item.get("Created")))
                )
        return sorted(owned, key=lambda resource: resource.ref.external_id)

    async def health(self) -> str:
        """``GET /_ping`` and ``GET /version`` on the Engine; a one-line description.

        Raises :class:`ProviderUnavailable` if the daemon cannot be reached.
        """
        return await self._engine.health()

    async def aclose(self) -> None:
        """Let pending kills finish (bounded), then close the Engine connection.

        Containers are left as they are.
        """
        pending = list(self._background)
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_WAIT_SECONDS)
        await self._engine.aclose()
