"""What every E2B (or Cube) sandbox of one provider instance shares: its view of the provider."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from mango.provider import ExposedPort
from mango.provider.http import ApiClient
from mango.provider.remote import Presence, ProviderView
from mango_provider_e2b.control import ControlPlane, SandboxInfo, SandboxState
from mango_provider_e2b.envd import Envd, EnvdAddress

__all__ = ["Remote"]


@attrs.define(eq=False, kw_only=True)
class Remote(ProviderView):
    """The kit's provider view with the two pools, the envd addressing and the idle timeout.

    ``control`` is the control-plane client, ``data`` the one pool every
    sandbox's envd is reached through, ``address`` where a sandbox record's
    envd answers, ``idle_timeout`` the seconds an idle sandbox lives before
    it pauses, ``port_address`` where its other ports answer (E2B only).
    """

    control: ControlPlane
    data: ApiClient
    address: Callable[[SandboxInfo], EnvdAddress]
    idle_timeout: float
    port_address: Callable[[SandboxInfo, int], ExposedPort] | None = None
    """Where a sandbox's port is reached by any client (``None``: the service offers none)."""

    def envd(self, info: SandboxInfo) -> Envd:
        """The envd client of the sandbox ``info`` describes (its current token and domain)."""
        return Envd(self.data, self.address(info), self.name, self.envd_version(info))

    def envd_version(self, info: SandboxInfo) -> str | None:
        """The envd version to go by: the dialect's (Cube reports a constant) or the record's."""
        return self.control.dialect.envd_version or info.envd_version

    @property
    def lifetime(self) -> bool:
        """Whether the service keeps a lifetime per sandbox that mango must extend (E2B)."""
        return self.control.dialect.lifetime

    async def presence(self, sandbox_id: str) -> Presence:
        """One ``GET /sandboxes/{id}``: paused is stopped; a 404 (SandboxNotFound) or a
        killing or killed state is gone."""
        state = (await self.control.get(sandbox_id)).state
        if state in SandboxState.GONE:
            return Presence.GONE
        if state == SandboxState.PAUSED:
            return Presence.STOPPED
        return Presence.RUNNING

    async def remove(self, sandbox_id: str) -> None:
        """``DELETE /sandboxes/{id}`` (gone already is success)."""
        await self.control.kill(sandbox_id)
