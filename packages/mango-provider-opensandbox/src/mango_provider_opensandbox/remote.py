"""What every OpenSandbox sandbox of one provider instance shares: its view of the provider."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import attrs

from mango.provider import ProviderUnavailable, SandboxSpec
from mango.provider.deadline import maintenance_timeout
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

__all__ = ["PAUSED_STATES", "TRANSITION_SECONDS", "OpenSandboxRemote"]

PAUSED_STATES = frozenset({"Paused", "Pausing"})
"""States of a sandbox that keeps its workspace but runs nothing; a resume brings it back."""
TRANSITION_SECONDS = 120.0
"""How long a pause or resume waits for Paused or Running (within the caller's deadline)."""
_POLL_INITIAL = 0.05
_POLL_MAX = 1.0


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

    # ------------------------------------------------------------------ pause and resume

    async def state(self, sandbox_id: str) -> str:
        """The lifecycle state now (:class:`SandboxNotFound` if gone or going)."""
        state = state_of(await self.lifecycle.get(sandbox_id))
        if state in GONE_STATES:
            raise self.not_found(sandbox_id)
        return state

    async def pause(self, sandbox_id: str) -> None:
        """Pause ``sandbox_id`` and wait until it is Paused; idempotent.

        A Pausing one is waited for; a Resuming one is waited for and then
        paused. The server's refusal (409, or the Docker runtime's 500 for a
        second pause) is judged by the state read after it.
        """
        await self._settle(sandbox_id, "Paused", "Running", self.lifecycle.pause)

    async def resume(self, sandbox_id: str) -> None:
        """Resume ``sandbox_id`` and wait until it is Running; idempotent."""
        await self._settle(sandbox_id, "Running", "Paused", self.lifecycle.resume)

    async def _settle(
        self,
        sandbox_id: str,
        target: str,
        source: str,
        request: Callable[[str], Awaitable[bool]],
    ) -> None:
        verb = "pause" if target == "Paused" else "resume"
        bound = min(
            TRANSITION_SECONDS,
            maintenance_timeout(SandboxSpec(timeout=TRANSITION_SECONDS)) or TRANSITION_SECONDS,
        )
        deadline = time.monotonic() + bound
        delay = _POLL_INITIAL
        asked = False
        while True:
            state = await self.state(sandbox_id)
            if state == target:
                return
            if state == "Failed":
                raise ProviderUnavailable(
                    f"{verb} OpenSandbox sandbox {sandbox_id}: the sandbox has failed"
                )
            if state == source and not asked:
                asked = True
                if not await request(sandbox_id):
                    continue  # refused for its state: what is it now?
            if time.monotonic() + delay > deadline:
                raise ProviderUnavailable(
                    f"{verb} OpenSandbox sandbox {sandbox_id}: still {state or 'unknown'} "
                    f"after {bound:.0f}s"
                )
            # Pausing, Resuming (another caller's transition) or Pending: ask again.
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
