"""The envd-based provider: one E2B (or Cube) sandbox per Session key.

* **Identity.** Each sandbox carries the ownership labels as its metadata
  (``io.mango.managed``, ``io.mango.namespace``, ``io.mango.session_key``).
  There is no create-if-absent on the service, so ``create`` lists by those
  labels first, creates only if nothing is there, and after a failed create
  (a lost answer, a 5xx) lists again: a retry finds the sandbox the lost
  answer made instead of making a second one.
* **Attach** reads the sandbox by id and checks its metadata against the
  key. A running one is used as the get describes it (envd's version, token
  and domain, and ``endAt``: the check before each command extends the
  timeout once a command needs more than is left), so attach is one call; a connect follows
  only where the answer has no ``endAt``. A paused one stays paused
  (capability ``pause``): SessionManager's acquire resumes it (its
  keep-alive, or the resume of a Session it paused). A 404 is
  :class:`SandboxNotFound`; nothing is recreated.
* **Pause** (capability ``pause``) is ``POST /sandboxes/{id}/pause`` (memory
  and filesystem), resume is ``connect``; by reference, both check the
  sandbox's metadata first. A command running at the pause is frozen with
  the VM, its stream cut; it takes the stream up after the resume.
* **Persistence.** Sandboxes are created with ``autoPause``: idle for the
  idle timeout, they pause (memory and disk kept) instead of dying; the
  sandbox's keep-alive resumes them on every acquire and extends the timeout
  before each command, so a busy Session is never paused under a tool step.
* **Pools.** One httpx pool for the control plane and one for the data plane
  (envd) per provider instance, shared by all its sandboxes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import attrs
import httpx

from mango.provider import (
    Capability,
    CapabilitySet,
    ExposedPort,
    NetworkMode,
    OwnedResource,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    validate_session_id,
)
from mango.provider.execution import checkpoint
from mango.provider.http import ApiClient, PinnedTransport, RetryPolicy, retrying
from mango.provider.ownership import Ownership, namespace_field
from mango_provider_e2b.control import ControlPlane, SandboxInfo, SandboxState
from mango_provider_e2b.envd import TRAFFIC_TOKEN_HEADER, EnvdAddress
from mango_provider_e2b.options import EnvdOptions
from mango_provider_e2b.remote import Remote
from mango_provider_e2b.sandbox import ROOT, E2BSandbox

__all__ = ["CREATE_RETRY", "E2BProvider"]

CREATE_RETRY = RetryPolicy(attempts=3, timeout=60.0)
"""Budget of create-or-find: safe to repeat, since each attempt looks before it creates."""


@attrs.define(eq=False)
class E2BProvider:
    """A provider over one E2B-compatible service (see the module docstring).

    ``transport`` replaces httpx's for both pools (tests). Constructing it
    does no I/O; the service is contacted on first use.
    """

    options: EnvdOptions
    namespace: str = namespace_field()
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, kw_only=True, repr=False)
    ownership: Ownership = attrs.field(init=False)
    _control: ControlPlane = attrs.field(init=False, repr=False)
    _remote: Remote = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        options = self.options
        self.ownership = Ownership(options.provider, self.namespace)
        control_api = ApiClient(
            options.api_url,
            auth_headers=options.dialect.auth_headers(options.api_key),
            timeout=options.request_timeout,
            transport=self.transport,
        )
        data_transport: httpx.AsyncBaseTransport | None = self.transport
        if options.proxy_host:
            data_transport = PinnedTransport(
                options.proxy_host,
                options.proxy_port,
                scheme=options.envd_scheme,
                transport=self.transport,
            )
        data_api = ApiClient(
            "",
            timeout=options.request_timeout,
            secrets=options.secrets,
            transport=data_transport,
        )
        self._control = ControlPlane(
            control_api, options.dialect, pause_memory=options.pause_memory
        )
        self._remote = Remote(
            name=options.provider,
            control=self._control,
            data=data_api,
            address=self._address,
            idle_timeout=options.idle_timeout,
            port_address=self._port_address if options.dialect.exposes_ports else None,
            max_output_bytes=options.max_output_bytes,
            max_read_bytes=options.max_read_bytes,
        )

    def _address(self, info: SandboxInfo) -> EnvdAddress:
        options = self.options
        return EnvdAddress.build(
            info.sandbox_id,
            domain=info.domain or options.domain,
            scheme=options.envd_scheme,
            access_token=info.envd_access_token,
            traffic_token=info.traffic_access_token,
            shared_url=options.shared_envd_url,
            api_key_header=options.api_key if options.dialect.data_plane_api_key else None,
        )

    def _port_address(self, info: SandboxInfo, port: int) -> ExposedPort:
        """E2B's address of ``port`` in the sandbox ``info`` describes.

        With one shared sandbox URL (``E2B_SANDBOX_URL``, a client-proxy
        reached by IP address or ``sandbox.<domain>``), that URL and the
        client-proxy's routing headers ``E2b-Sandbox-Id`` and
        ``E2b-Sandbox-Port``; else the host URL E2B documents,
        ``<scheme>://<port>-<id>.<domain>``. The traffic access token, where
        the service issued one, goes in a header, never in the URL.
        """
        options = self.options
        headers = {}
        if info.traffic_access_token:
            headers[TRAFFIC_TOKEN_HEADER] = info.traffic_access_token
        if options.shared_envd_url:
            headers["E2b-Sandbox-Id"] = info.sandbox_id
            headers["E2b-Sandbox-Port"] = str(port)
            return ExposedPort(options.shared_envd_url.rstrip("/"), headers)
        domain = info.domain or options.domain
        return ExposedPort(f"{options.envd_scheme}://{port}-{info.sandbox_id}.{domain}", headers)

    @property
    def name(self) -> str:
        """``e2b`` or ``cube``."""
        return self.options.provider

    @property
    def capabilities(self) -> CapabilitySet:
        """The file API (``file-api``: envd's ``Filesystem``), background processes (envd's
        process service and the kit's supervisor) and pause, for E2B and Cube alike; exposed
        ports (``exposed-ports``) for E2B only (see :attr:`Dialect.exposes_ports`)."""
        if self.options.dialect.exposes_ports:
            return CapabilitySet.of(
                Capability.FILE_API,
                Capability.BACKGROUND_PROCESSES,
                Capability.PAUSE,
                Capability.EXPOSED_PORTS,
            )
        return CapabilitySet.of(
            Capability.FILE_API, Capability.BACKGROUND_PROCESSES, Capability.PAUSE
        )

    @property
    def control(self) -> ControlPlane:
        """The control-plane client (for tests and tools)."""
        return self._control

    def _sandbox(
        self, info: SandboxInfo, spec: SandboxSpec, alive_since: float, *, left: float | None = None
    ) -> E2BSandbox:
        """A client of ``info``'s sandbox, alive for the idle timeout from ``alive_since`` (or,
        ``left`` given, for that many seconds from then)."""
        lifetime = self.options.idle_timeout if left is None else left
        return E2BSandbox(self._remote, info, spec, alive_until=alive_since + lifetime)

    async def _ready(self, sandbox: E2BSandbox) -> E2BSandbox:
        # Idempotent: the workspace of a found or resumed sandbox is made again if missing.
        await sandbox._make_dir(ROOT)
        return sandbox

    async def _connected(
        self, sandbox_id: str, spec: SandboxSpec, *, ensure_root: bool = True
    ) -> E2BSandbox:
        started = time.monotonic()
        info = await self._remote.resume(sandbox_id, timeout=self.options.idle_timeout)
        sandbox = self._sandbox(info, spec, started)
        return await self._ready(sandbox) if ensure_root else sandbox

    async def _owned_info(self, session_key: str) -> SandboxInfo | None:
        found = await self._control.list(self.ownership.labels(session_key))
        return min(found, key=lambda info: info.sandbox_id) if found else None

    async def create(self, session_key: str, spec: SandboxSpec) -> E2BSandbox:
        """Create-if-absent the sandbox of ``session_key`` (see the module docstring)."""
        labels = self.ownership.labels(session_key)  # InvalidInput for an invalid key
        await checkpoint()

        async def once() -> E2BSandbox:
            existing = await self._owned_info(session_key)
            if existing is not None:
                return await self._connected(existing.sandbox_id, spec)
            started = time.monotonic()
            try:
                info = await self._control.create(
                    template=spec.image or self.options.template,
                    metadata=labels,
                    timeout=self.options.idle_timeout,
                    internet=spec.network is not NetworkMode.NONE,
                )
            except ProviderUnavailable:
                # The answer may be lost while the sandbox exists: look before trying again.
                existing = await self._owned_info(session_key)
                if existing is None:
                    raise
                return await self._connected(existing.sandbox_id, spec)
            sandbox = self._sandbox(info, spec, started)
            try:
                return await self._ready(sandbox)
            except BaseException:
                await sandbox.destroy()
                raise

        return await retrying(once, policy=CREATE_RETRY)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> E2BSandbox:
        """Connect to ``ref`` after checking it is ``session_key``'s; never creates."""
        key = validate_session_id(session_key)
        ref = self.ownership.check_ref(ref)
        info = await self._control.get(ref.external_id)
        self.ownership.check(info.metadata, key, what=f"{self.name} sandbox {ref.external_id}")
        if info.state == SandboxState.PAUSED:
            # Attach does not resume: a resume (or SessionManager's keep-alive) does.
            return self._sandbox(info, spec, time.monotonic())
        left = _seconds_left(info)
        if info.state == SandboxState.RUNNING and left is not None:
            # The get answered what a connect would (envd's version, token and domain) and
            # how long the sandbox has left: attach is one call, as the SDK's connect is.
            # The check before each command extends the timeout once it needs more than is left.
            return self._sandbox(info, spec, time.monotonic(), left=left)
        # Bound sandboxes got their workspace at create: one get and one connect.
        return await self._connected(ref.external_id, spec, ensure_root=False)

    async def _owned(self, session_key: str, ref: SandboxRef) -> str:
        key = validate_session_id(session_key)
        ref = self.ownership.check_ref(ref)
        info = await self._control.get(ref.external_id)  # SandboxNotFound if gone
        self.ownership.check(info.metadata, key, what=f"{self.name} sandbox {ref.external_id}")
        if info.state in SandboxState.GONE:
            raise self._remote.not_found(ref.external_id)
        return ref.external_id

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        """Pause ``ref`` after checking its metadata; a paused one is a no-op."""
        await self._remote.pause(await self._owned(session_key, ref))

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        """Resume ``ref`` (connect, with the idle timeout) after checking its metadata."""
        await self._remote.resume(await self._owned(session_key, ref))

    async def find(self, session_key: str) -> SandboxRef | None:
        """The ref of the sandbox carrying ``session_key``'s labels, or ``None`` (no resume)."""
        validate_session_id(session_key)
        info = await self._owned_info(session_key)
        return None if info is None else SandboxRef(self.name, info.sandbox_id)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Kill ``ref`` after checking its metadata; gone is success, nothing is resumed."""
        key = validate_session_id(session_key)
        ref = self.ownership.check_ref(ref)
        try:
            info = await self._control.get(ref.external_id)
        except SandboxNotFound:
            return
        self.ownership.check(info.metadata, key, what=f"{self.name} sandbox {ref.external_id}")
        self._remote.tracker.mark_destroyed(ref.external_id)
        await self._control.kill(ref.external_id)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every running or paused sandbox of this namespace."""
        owned: list[OwnedResource] = []
        for info in await self._control.list(self.ownership.selector()):
            session_hash = self.ownership.owned_hash(info.metadata)
            if session_hash is not None:
                ref = SandboxRef(self.name, info.sandbox_id)
                owned.append(OwnedResource(ref, session_hash, created_at=info.started_at))
        return sorted(owned, key=lambda resource: resource.ref.external_id)

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Kill a listed sandbox after checking its metadata by the hashed label (``mango gc``)."""
        ref = self.ownership.check_ref(resource.ref)
        try:
            info = await self._control.get(ref.external_id)
        except SandboxNotFound:
            return
        what = f"{self.name} sandbox {ref.external_id}"
        self.ownership.check_hash(info.metadata, resource.session_hash, what=what)
        self._remote.tracker.mark_destroyed(ref.external_id)
        await self._control.kill(ref.external_id)

    async def health(self) -> str:
        """One authenticated list call: reachable and the credentials accepted."""
        await self._control.probe()
        return f"{self.name} API at {self.options.api_url}: reachable, credentials accepted"

    async def aclose(self) -> None:
        """Close both pools; sandboxes stay."""
        try:
            await self._control.aclose()
        finally:
            await self._remote.data.aclose()


def _seconds_left(info: SandboxInfo) -> float | None:
    """Seconds until the service ends ``info``'s sandbox (``endAt``); None if not said."""
    if info.end_at is None:
        return None
    return max(0.0, (info.end_at - datetime.now(UTC)).total_seconds())
