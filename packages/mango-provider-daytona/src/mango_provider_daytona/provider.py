"""The Daytona provider: one Daytona sandbox per Session key."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_READ_BYTES,
    Capability,
    CapabilitySet,
    ConfigurationError,
    InvalidInput,
    MangoError,
    MemorySize,
    NetworkMode,
    OwnedResource,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    admit,
    positive_int,
    validate_session_id,
)
from mango.provider.ownership import Ownership, listed_time, namespace_field
from mango_provider_daytona.api import DaytonaApi, sandbox_state
from mango_provider_daytona.layout import (
    DEFAULT_AUTO_PAUSE_MINUTES,
    DEFAULT_START_TIMEOUT,
    PROVIDER_NAME,
)
from mango_provider_daytona.remote import GONE_STATES, DaytonaRemote
from mango_provider_daytona.sandbox import DaytonaSandbox

__all__ = [
    "DEFAULT_AUTO_PAUSE_MINUTES",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_START_TIMEOUT",
    "PROVIDER_NAME",
    "DaytonaProvider",
    "memory_gib",
]

KEEP_ALIVE_FRESH_SECONDS = 30.0
"""A sandbox whose toolbox answered a command this recently needs no keep-alive request."""
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_GIB = 1024**3


def memory_gib(size: int | str) -> int:
    """A memory size in whole GiB, rounded up: what the Daytona API's ``memory`` takes.

    ``size`` is a number of bytes (``SandboxSpec.memory_bytes``) or text of
    mango's memory grammar (``512m``, ``2g``, ``1.5GiB``, ``2Gi``); ``512m``
    asks for 1 GiB, never 512. Anything else is :class:`InvalidInput`.
    """
    return max(1, math.ceil(MemorySize.parse(size).bytes / _GIB))


def _check_spec(spec: object) -> SandboxSpec:
    if not isinstance(spec, SandboxSpec):
        raise InvalidInput(f"expected a SandboxSpec, got {type(spec).__name__}")
    return spec


@attrs.define(eq=False)
class DaytonaProvider:
    """Sandboxes on Daytona, one per Session key, found again by a deterministic name.

    ``create`` looks the name up first, creates on a miss, and resolves a
    name conflict or a lost response by looking the name up again; the
    reference holds Daytona's durable sandbox id. ``attach`` reads the
    sandbox by id, checks its ownership labels and starts it (with
    progress) if Daytona paused, stopped or archived it. Construction does no
    I/O. Names and labels carry ``namespace``.
    """

    api_url: str
    api_key: str = attrs.field(repr=False)
    target: str | None = attrs.field(default=None, kw_only=True)
    """Region to create sandboxes in (``DAYTONA_TARGET``); ``None``: the account's default."""
    snapshot: str | None = attrs.field(default=None, kw_only=True)
    """Snapshot of sandboxes whose spec and settings name no image (``DAYTONA_SNAPSHOT``)."""
    image: str | None = attrs.field(default=None, kw_only=True)
    """Image built for sandboxes whose spec names none (``DAYTONA_IMAGE``)."""
    auto_pause_minutes: int = attrs.field(default=DEFAULT_AUTO_PAUSE_MINUTES, kw_only=True)
    """Idle minutes before Daytona pauses a sandbox; 0: never."""
    start_timeout: float = attrs.field(default=DEFAULT_START_TIMEOUT, kw_only=True)
    """Seconds to wait for a sandbox to be started."""
    max_output_bytes: int = attrs.field(
        default=DEFAULT_MAX_OUTPUT_BYTES, kw_only=True, validator=positive_int
    )
    max_read_bytes: int = attrs.field(
        default=DEFAULT_MAX_READ_BYTES, kw_only=True, validator=positive_int
    )
    progress: Callable[[str], None] | None = attrs.field(default=None, kw_only=True, repr=False)
    """Receives progress lines while a sandbox is started or built (default: the logger)."""
    extra_labels: Mapping[str, str] = attrs.field(factory=dict, kw_only=True)
    """More labels for every sandbox (for example a test run's)."""
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, kw_only=True, repr=False)
    poll_interval: float = attrs.field(default=0.5, kw_only=True)
    """First delay between state polls while waiting (doubling to 5 s)."""
    namespace: str = namespace_field()
    _api: DaytonaApi = attrs.field(init=False, repr=False)
    _remote: DaytonaRemote = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.api_key.strip():
            raise ConfigurationError("the Daytona API key is empty", hint="set DAYTONA_API_KEY")
        clash = Ownership.reserved(self.extra_labels)
        if clash:
            raise InvalidInput(f"extra labels may not set the ownership labels {sorted(clash)}")
        self._api = DaytonaApi.open(self.api_url, self.api_key, transport=self.transport)
        self._remote = DaytonaRemote(
            api=self._api,
            api_key=self.api_key,
            transport=self.transport,
            start_timeout=self.start_timeout,
            poll_interval=self.poll_interval,
            progress=self.progress,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
        )

    @property
    def name(self) -> str:
        """Always ``"daytona"``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """The file API (``file-api``), background processes (session commands and the kit's
        supervisor) and exposed ports (preview links); package setup, mounts and limited
        network are not built."""
        return CapabilitySet.of(
            Capability.FILE_API, Capability.BACKGROUND_PROCESSES, Capability.EXPOSED_PORTS
        )

    @property
    def ownership(self) -> Ownership:
        """Labels and names of this provider in its namespace."""
        return Ownership(PROVIDER_NAME, self.namespace)

    @property
    def api(self) -> DaytonaApi:
        """The control-plane client."""
        return self._api

    @property
    def _fresh_seconds(self) -> float:
        # Well inside the auto-pause interval (a minute at least), never more than 30 s.
        if self.auto_pause_minutes <= 0:
            return KEEP_ALIVE_FRESH_SECONDS
        return min(KEEP_ALIVE_FRESH_SECONDS, self.auto_pause_minutes * 60 / 4)

    async def _open(self, document: Mapping[str, Any], spec: SandboxSpec) -> DaytonaSandbox:
        toolbox = self._remote.toolbox(document)
        sandbox_id = str(document["id"])
        try:
            root = await toolbox.home_dir()
        except MangoError as exc:
            await self._remote.fail(sandbox_id, exc)
        return DaytonaSandbox(
            provider=self._remote,
            ref=SandboxRef(PROVIDER_NAME, sandbox_id),
            spec=spec,
            root=root,
            toolbox=toolbox,
            fresh_seconds=self._fresh_seconds,
        )

    # ---------------------------------------------------------------- lifecycle

    def _create_body(self, key: str, name: str, spec: SandboxSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "labels": {**self.extra_labels, **self.ownership.labels(key)},
            "public": False,
            "networkBlockAll": spec.network is not NetworkMode.BRIDGE,
            "autoPauseInterval": self.auto_pause_minutes,
            "autoStopInterval": 0,
            "autoArchiveInterval": 0,
            "autoDeleteInterval": -1,
        }
        if self.target:
            body["target"] = self.target
        image = spec.image or self.image
        if image:
            body["buildInfo"] = {"dockerfileContent": f"FROM {image}\n"}
            if spec.cpus is not None:
                body["cpu"] = max(1, math.ceil(spec.cpus))
            if spec.memory_bytes is not None:
                body["memory"] = memory_gib(spec.memory_bytes)
        else:
            if spec.cpus is not None or spec.memory is not None:
                raise InvalidInput(
                    "daytona takes CPU and memory limits only for a sandbox built from an image; "
                    "a snapshot fixes them",
                    hint="set DAYTONA_IMAGE (or the spec's image), or drop cpus/memory",
                )
            if self.snapshot:
                body["snapshot"] = self.snapshot
        return body

    async def create(self, session_key: str, spec: SandboxSpec) -> DaytonaSandbox:
        """Create-if-absent the sandbox of ``session_key``; idempotent.

        The deterministic name is looked up first; a 409 or a lost response
        is resolved by looking it up again. A sandbox with that name that
        this key and namespace do not own raises :class:`OwnershipError`.
        Raises :class:`InvalidInput` for an invalid key and
        :class:`CapabilityNotSupported` for package setup or limited network.
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        admit(PROVIDER_NAME, self.capabilities, spec)
        body = self._create_body(key, self.ownership.name(key), spec)
        await asyncio.sleep(0)  # a task cancelled before the call creates nothing
        name = body["name"]
        document = await self._api.get(name)
        if document is not None and sandbox_state(document) in GONE_STATES:
            document = None  # a deleted sandbox's record; its name is free again
        if document is None:
            try:
                document = await self._api.create(body)
            except ProviderUnavailable:
                # The response may be lost after Daytona created it: the name tells.
                document = await self._api.get(name)
                if document is None:
                    raise
            if document is None:  # 409: another creator holds the name
                document = await self._api.get(name)
                if document is None:
                    raise ProviderUnavailable(
                        f"daytona sandbox name {name} is taken but no such sandbox is visible"
                    )
        self.ownership.check(document.get("labels"), key, what=f"daytona sandbox {name}")
        document = await self._remote.wait_started(document, what=f"daytona sandbox {name}")
        return await self._open(document, spec)

    def _sandbox_id(self, ref: SandboxRef) -> str:
        external_id = self.ownership.check_ref(ref).external_id
        if not _ID.match(external_id):
            raise InvalidInput(f"{ref} is not a Daytona sandbox id")
        return external_id

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> DaytonaSandbox:
        """Rebuild a client for ``ref`` after checking it belongs to ``session_key``.

        Starts the sandbox (reporting progress) if Daytona paused, stopped or
        archived it, waiting at most :attr:`start_timeout`. Raises
        :class:`OwnershipError` for another key's or deployment's sandbox and
        :class:`SandboxNotFound` if it is gone (nothing is recreated).
        """
        key = validate_session_id(session_key)
        spec = _check_spec(spec)
        sandbox_id = self._sandbox_id(ref)
        await asyncio.sleep(0)
        document = await self._api.get(sandbox_id)
        if document is None or sandbox_state(document) in GONE_STATES:
            raise SandboxNotFound(f"daytona sandbox {sandbox_id} no longer exists")
        if document.get("id") != sandbox_id:
            # Looked up by id, answered by name: not the sandbox the reference names.
            raise SandboxNotFound(f"daytona sandbox {sandbox_id} no longer exists")
        self.ownership.check(document.get("labels"), key, what=f"daytona sandbox {sandbox_id}")
        document = await self._remote.wait_started(document, what=f"daytona sandbox {sandbox_id}")
        return await self._open(document, spec)

    async def find(self, session_key: str) -> SandboxRef | None:
        """The reference of ``session_key``'s sandbox in this namespace, or None. Read-only."""
        key = validate_session_id(session_key)
        document = await self._api.get(self.ownership.name(key))
        if document is None or sandbox_state(document) in GONE_STATES:
            return None
        self.ownership.check(document.get("labels"), key, what="daytona sandbox")
        return SandboxRef(PROVIDER_NAME, str(document["id"]))

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Delete ``ref``'s sandbox without starting it; idempotent (gone is success).

        Its labels are checked first: :class:`OwnershipError` for another
        Session's or deployment's sandbox.
        """
        key = validate_session_id(session_key)
        sandbox_id = self._sandbox_id(ref)
        await asyncio.sleep(0)
        document = await self._api.get(sandbox_id)
        if document is None or sandbox_state(document) in GONE_STATES:
            return
        if document.get("id") != sandbox_id:
            return
        self.ownership.check(document.get("labels"), key, what=f"daytona sandbox {sandbox_id}")
        self._remote.tracker.mark_destroyed(sandbox_id)
        await self._api.delete(sandbox_id)

    async def list_owned(self) -> list[OwnedResource]:
        """Every sandbox of this namespace, in any state (a label filter on the API)."""
        owned = []
        for item in await self._api.list(self.ownership.selector()):
            session_hash = self.ownership.owned_hash(item.get("labels"))
            sandbox_id = item.get("id")
            if (
                session_hash is not None
                and isinstance(sandbox_id, str)
                and sandbox_state(item) not in GONE_STATES
            ):
                ref = SandboxRef(PROVIDER_NAME, sandbox_id)
                made = listed_time(item.get("createdAt"))
                owned.append(OwnedResource(ref, session_hash, created_at=made))
        return sorted(owned, key=lambda resource: resource.ref.external_id)

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Delete a listed sandbox after checking its labels by the hashed label (``mango gc``)."""
        sandbox_id = self._sandbox_id(resource.ref)
        await asyncio.sleep(0)
        document = await self._api.get(sandbox_id)
        if document is None or sandbox_state(document) in GONE_STATES:
            return
        if document.get("id") != sandbox_id:
            return
        what = f"daytona sandbox {sandbox_id}"
        self.ownership.check_hash(document.get("labels"), resource.session_hash, what=what)
        self._remote.tracker.mark_destroyed(sandbox_id)
        await self._api.delete(sandbox_id)

    async def health(self) -> str:
        """One authenticated list call; a one-line description.

        Raises :class:`ProviderUnavailable` if the API cannot be reached and
        :class:`ConfigurationError` if it refuses the key.
        """
        owned = await self._api.list(self.ownership.selector(), limit=1)
        url = httpx.URL(self.api_url)
        return (
            f"daytona API at {url.scheme}://{url.netloc.decode()}{url.path} answers "
            f"({'sandboxes' if owned else 'no sandboxes'} of namespace {self.namespace})"
        )

    async def aclose(self) -> None:
        """Close the API and toolbox connections; sandboxes stay as they are."""
        await self._remote.aclose()
