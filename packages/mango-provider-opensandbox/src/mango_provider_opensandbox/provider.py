"""OpenSandboxProvider: one OpenSandbox sandbox per Session key, found by its metadata.

Identity is the ownership metadata (``io.mango.managed``, ``io.mango.namespace``,
``io.mango.session_key``): OpenSandbox has no names, so ``create`` lists by
that metadata first and creates only when nothing matches; if the create
call fails (a lost response, a 5xx after the server acted) it lists again
and adopts what is there. There is no atomic create-if-absent: two workers
racing may make two sandboxes, and SessionManager's binding election
destroys the loser.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_READ_BYTES,
    CapabilitySet,
    OwnedResource,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
)
from mango.provider.deadline import maintenance_timeout
from mango.provider.http import ApiClient, RetryPolicy
from mango.provider.ownership import Ownership, listed_time, namespace_field
from mango_provider_opensandbox.layout import (
    API_KEY_HEADER,
    CAPABILITIES,
    DEFAULT_IMAGE,
    ENTRYPOINT,
    NETWORK_LABEL,
    PROVIDER_NAME,
    ROOT,
)
from mango_provider_opensandbox.lifecycle import GONE_STATES, LifecycleApi, state_of
from mango_provider_opensandbox.network import create_policy
from mango_provider_opensandbox.remote import OpenSandboxRemote
from mango_provider_opensandbox.resources import resource_limits
from mango_provider_opensandbox.sandbox import OpenSandboxSandbox

__all__ = [
    "CAPABILITIES",
    "DEFAULT_IMAGE",
    "DEFAULT_MAX_READ_BYTES",
    "READY_SECONDS",
    "OpenSandboxProvider",
]

READY_SECONDS = 120.0
"""How long create waits for a new sandbox to be ``Running`` (within the caller's deadline)."""
_POLL_INITIAL = 0.05
"""First pause before asking a new sandbox's state again (doubling up to :data:`_POLL_MAX`):
a container that starts within a fraction of a second is seen as soon, a slow image pull
costs a few more ``GET`` calls than a longer first pause would."""
_POLL_MAX = 2.0


@attrs.define(eq=False)
class OpenSandboxProvider:
    """The ``opensandbox`` provider over one OpenSandbox server (``OPEN_SANDBOX_DOMAIN``).

    ``base_url`` is the server (``http://host:8080``; the API is under
    ``/v1``), ``api_key`` its credential (held here and in the HTTP clients
    only). With ``server_proxy`` every data-plane call goes through the
    server (``/sandboxes/{id}/proxy/{port}``), so the worker needs no route
    to sandbox networks; the API key then travels to the server on those
    calls too, never to a sandbox. ``transport`` is for tests.
    """

    base_url: str
    api_key: str | None = attrs.field(default=None, repr=False)
    namespace: str = namespace_field()
    server_proxy: bool = False
    image: str = DEFAULT_IMAGE
    cpu: str | None = None
    memory: str | None = None
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES
    request_timeout: float = 30.0
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    ownership: Ownership = attrs.field(init=False)
    _api: ApiClient = attrs.field(init=False, repr=False)
    _data: ApiClient = attrs.field(init=False, repr=False)
    _lifecycle: LifecycleApi = attrs.field(init=False, repr=False)
    _remote: OpenSandboxRemote = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self.base_url.strip().rstrip("/")
        if "://" not in self.base_url:
            self.base_url = "http://" + self.base_url
        self.ownership = Ownership(PROVIDER_NAME, self.namespace)
        auth = {API_KEY_HEADER: self.api_key} if self.api_key else {}
        secrets = (self.api_key,) if self.api_key else ()
        self._api = ApiClient(
            self.base_url,
            auth_headers=auth,
            headers={"Accept": "application/json"},
            timeout=self.request_timeout,
            retry=self.retry,
        )
        # One pool for every sandbox's data plane. The key is blanked from its
        # error excerpts, and sent only through the server proxy (DataPlane).
        self._data = ApiClient("", timeout=self.request_timeout, retry=self.retry, secrets=secrets)
        protocol = self.base_url.split("://", 1)[0]
        self._lifecycle = LifecycleApi(self._api, protocol=protocol)
        self._remote = OpenSandboxRemote(
            lifecycle=self._lifecycle,
            data=self._data,
            server_proxy=self.server_proxy,
            api_key=self.api_key,
            request_timeout=self.request_timeout,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
        )

    # ------------------------------------------------------------------ identity

    @property
    def name(self) -> str:
        """``opensandbox``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """Package setup, limited network, the file API, background processes, pause."""
        return CAPABILITIES

    @property
    def lifecycle(self) -> LifecycleApi:
        """The lifecycle API client (for tests and tools)."""
        return self._lifecycle

    # ------------------------------------------------------------------ lifecycle

    async def create(self, session_key: str, spec: SandboxSpec) -> OpenSandboxSandbox:
        """Create-if-absent the sandbox of ``session_key``: list by its metadata, else create.

        A failed create is followed by a second listing, which adopts a
        sandbox the server made before its answer was lost.
        """
        labels = self.ownership.labels(session_key)
        found = await self._owned_sandbox(session_key)
        if found is None:
            body = self._create_body(labels, spec)
            try:
                created = await self._lifecycle.create(body)
            except (ProviderUnavailable, PermanentError):
                found = await self._owned_sandbox(session_key)
                if found is None:
                    raise
            else:
                found = await self._wait_running(created)
        return await self._open(session_key, found, spec, started=True)

    def _create_body(self, labels: Mapping[str, str], spec: SandboxSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "image": {"uri": spec.image or self.image},
            "entrypoint": list(ENTRYPOINT),
            "resourceLimits": resource_limits(spec, cpu=self.cpu, memory=self.memory),
            # Recorded so that a later allowlist can refuse a sandbox that has no
            # egress sidecar at once, instead of failing as unreachable.
            "metadata": {**labels, NETWORK_LABEL: spec.network.value},
        }
        policy = create_policy(spec)
        if policy is not None:
            body["networkPolicy"] = policy
        return body

    async def _wait_running(self, sandbox: dict[str, Any]) -> dict[str, Any]:
        sandbox_id = str(sandbox["id"])
        bound = min(
            READY_SECONDS, maintenance_timeout(SandboxSpec(timeout=READY_SECONDS)) or READY_SECONDS
        )
        deadline = time.monotonic() + bound
        pause = _POLL_INITIAL
        while True:
            state = state_of(sandbox)
            if state == "Running":
                return sandbox
            if state in ("Failed", *GONE_STATES):
                await self._delete_quietly(sandbox_id)
                raise ProviderUnavailable(
                    f"OpenSandbox sandbox {sandbox_id} ended up {state}: {_status_text(sandbox)}"
                )
            if time.monotonic() + pause > deadline:
                await self._delete_quietly(sandbox_id)
                raise ProviderUnavailable(
                    f"OpenSandbox sandbox {sandbox_id} was not running after {bound:.0f}s "
                    f"(state {state or 'unknown'})"
                )
            # Provisioning (an image pull) takes seconds to minutes; poll with backoff.
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)
            sandbox = await self._lifecycle.get(sandbox_id)

    async def _delete_quietly(self, sandbox_id: str) -> None:
        try:
            await self._lifecycle.delete(sandbox_id)
        except Exception:  # noqa: BLE001 - the original failure is what the caller must see
            return

    async def attach(
        self, session_key: str, ref: SandboxRef, spec: SandboxSpec
    ) -> OpenSandboxSandbox:
        """Rebuild a client for ``ref`` after checking its metadata; never creates.

        :class:`SandboxNotFound` if it is gone (or stopping). A paused
        sandbox stays paused: :meth:`resume` undoes a pause (SessionManager
        resumes a Session it paused before it attaches).
        """
        self.ownership.check_ref(ref)
        Ownership.session_hash(session_key)
        sandbox = await self._lifecycle.get(ref.external_id)
        self._check_owner(sandbox, session_key, ref.external_id)
        if state_of(sandbox) in GONE_STATES:
            raise SandboxNotFound(f"OpenSandbox sandbox {ref.external_id} is {state_of(sandbox)}")
        return await self._open(session_key, sandbox, spec, ensure_root=False)

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        """Pause ``ref`` by reference (metadata checked, no attach); idempotent."""
        await self._remote.pause(await self._owned_id(session_key, ref))

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        """Resume ``ref`` by reference (metadata checked, no attach); idempotent."""
        await self._remote.resume(await self._owned_id(session_key, ref))

    async def _owned_id(self, session_key: str, ref: SandboxRef) -> str:
        self.ownership.check_ref(ref)
        Ownership.session_hash(session_key)
        sandbox = await self._lifecycle.get(ref.external_id)
        self._check_owner(sandbox, session_key, ref.external_id)
        if state_of(sandbox) in GONE_STATES:
            raise SandboxNotFound(f"OpenSandbox sandbox {ref.external_id} is {state_of(sandbox)}")
        return ref.external_id

    async def find(self, session_key: str) -> SandboxRef | None:
        """The sandbox carrying ``session_key``'s metadata in this namespace, or None."""
        sandbox = await self._owned_sandbox(session_key)
        return None if sandbox is None else SandboxRef(PROVIDER_NAME, str(sandbox["id"]))

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Delete ``ref`` after checking its metadata (a lifecycle ``GET``, no attach)."""
        self.ownership.check_ref(ref)
        Ownership.session_hash(session_key)
        try:
            sandbox = await self._lifecycle.get(ref.external_id)
        except SandboxNotFound:
            return
        self._check_owner(sandbox, session_key, ref.external_id)
        self._remote.tracker.mark_destroyed(ref.external_id)
        await self._lifecycle.delete(ref.external_id)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every sandbox of this namespace, in any state."""
        owned: list[OwnedResource] = []
        for sandbox in await self._lifecycle.list(self.ownership.selector()):
            session_hash = self.ownership.owned_hash(sandbox.get("metadata"))
            if session_hash is not None and isinstance(sandbox.get("id"), str):
                ref = SandboxRef(PROVIDER_NAME, sandbox["id"])
                made = listed_time(sandbox.get("createdAt"))
                owned.append(OwnedResource(ref, session_hash, created_at=made))
        return owned

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Delete a listed sandbox after checking its hashed label (``mango gc``)."""
        ref = self.ownership.check_ref(resource.ref)
        try:
            sandbox = await self._lifecycle.get(ref.external_id)
        except SandboxNotFound:
            return
        what = f"OpenSandbox sandbox {ref.external_id}"
        self.ownership.check_hash(sandbox.get("metadata"), resource.session_hash, what=what)
        self._remote.tracker.mark_destroyed(ref.external_id)
        await self._lifecycle.delete(ref.external_id)

    async def health(self) -> str:
        """One lifecycle round trip; the credentials are checked by it."""
        total = await self._lifecycle.count()
        mode = "server proxy" if self.server_proxy else "direct endpoints"
        return f"OpenSandbox at {self.base_url} ({mode}): {total} sandbox(es) visible"

    async def aclose(self) -> None:
        """Close both connection pools; sandboxes stay."""
        await self._api.aclose()
        await self._data.aclose()

    # ------------------------------------------------------------------ helpers

    async def _owned_sandbox(self, session_key: str) -> dict[str, Any] | None:
        labels = self.ownership.labels(session_key)
        matches = [
            sandbox
            for sandbox in await self._lifecycle.list(labels)
            if isinstance(sandbox.get("id"), str)
            and state_of(sandbox) not in GONE_STATES
            and all((sandbox.get("metadata") or {}).get(k) == v for k, v in labels.items())
        ]
        # The oldest wins, so every worker adopts the same one.
        matches.sort(key=lambda sandbox: (str(sandbox.get("createdAt", "")), sandbox["id"]))
        return matches[0] if matches else None

    def _check_owner(self, sandbox: Mapping[str, Any], session_key: str, sandbox_id: str) -> None:
        self.ownership.check(
            sandbox.get("metadata"), session_key, what=f"OpenSandbox sandbox {sandbox_id}"
        )

    async def _open(
        self,
        session_key: str,
        sandbox: Mapping[str, Any],
        spec: SandboxSpec,
        *,
        ensure_root: bool = True,
        started: bool = False,
    ) -> OpenSandboxSandbox:
        sandbox_id = str(sandbox["id"])
        self._check_owner(sandbox, session_key, sandbox_id)
        execd = await self._remote.execd(sandbox_id)
        if started:
            # Running means the container runs; execd in it may not listen yet (the SDK
            # waits for its /ping as well).
            await execd.wait_ready(READY_SECONDS)
        if ensure_root:
            await execd.make_dirs({ROOT: 0o755})
        metadata = sandbox.get("metadata") or {}
        return OpenSandboxSandbox(
            provider=self._remote,
            ref=SandboxRef(PROVIDER_NAME, sandbox_id),
            network=str(metadata.get(NETWORK_LABEL, "")) or None,
            spec=spec,
            execd=execd,
        )


def _status_text(sandbox: Mapping[str, Any]) -> str:
    status = sandbox.get("status")
    if not isinstance(status, Mapping):
        return "no status"
    parts = [str(status.get(key)) for key in ("reason", "message") if status.get(key)]
    return "; ".join(parts)[:300] or "no reason given"
