"""What every OpenSandbox sandbox of one provider instance shares: its view of the provider."""

from __future__ import annotations

import attrs

from mango.provider.http import ApiClient
from mango.provider.remote import Presence, ProviderView
from mango_provider_opensandbox.execd import DataPlane, Egress, Execd
from mango_provider_opensandbox.layout import (
    API_KEY_HEADER,
    EGRESS_PORT,
    EXECD_PORT,
    PROVIDER_NAME,
)
from mango_provider_opensandbox.lifecycle import GONE_STATES, LifecycleApi, state_of

__all__ = ["PAUSED_STATES", "OpenSandboxRemote"]

PAUSED_STATES = frozenset({"Paused", "Pausing"})
"""States of a sandbox that keeps its workspace but runs nothing; a resume brings it back."""


@attrs.define(eq=False, kw_only=True)
class OpenSandboxRemote(ProviderView):
    """The kit's provider view with the lifecycle API and the one data-plane pool.

    ``data`` serves every sandbox's execd and egress sidecar. With
    ``server_proxy`` the data plane goes through the lifecycle server, which
    then needs the API key on those calls too (never sent to a sandbox).
    """

    name: str = PROVIDER_NAME
    lifecycle: LifecycleApi
    data: ApiClient
    server_proxy: bool = False
    api_key: str | None = attrs.field(default=None, repr=False)
    request_timeout: float = 30.0

    async def presence(self, sandbox_id: str) -> Presence:
        """One lifecycle ``GET``: ``Stopping``, ``Terminated`` or a 404 is gone; ``Paused`` is
        stopped."""
        state = state_of(await self.lifecycle.get(sandbox_id))
        if state in GONE_STATES:
            return Presence.GONE
        if state in PAUSED_STATES:
            return Presence.STOPPED
        return Presence.RUNNING

    async def remove(self, sandbox_id: str) -> None:
        """``DELETE /sandboxes/{id}`` (gone already is success)."""
        await self.lifecycle.delete(sandbox_id)

    async def _plane(self, sandbox_id: str, port: int) -> DataPlane:
        endpoint = await self.lifecycle.endpoint(sandbox_id, port, server_proxy=self.server_proxy)
        extra = {API_KEY_HEADER: self.api_key} if self.server_proxy and self.api_key else {}
        return DataPlane(self.data, endpoint, sandbox_id, self, extra)

    async def execd(self, sandbox_id: str) -> Execd:
        """The execd client of ``sandbox_id`` (its endpoint resolved now)."""
        return Execd(await self._plane(sandbox_id, EXECD_PORT))

    async def egress(self, sandbox_id: str) -> Egress:
        """The egress sidecar client of ``sandbox_id`` (its endpoint resolved now)."""
        return Egress(await self._plane(sandbox_id, EGRESS_PORT))
