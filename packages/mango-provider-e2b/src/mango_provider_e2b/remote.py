"""What every E2B (or Cube) sandbox of one provider instance shares: its view of the provider."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import attrs

from mango.provider import ExposedPort
from mango.provider.http import ApiClient
from mango.provider.remote import Presence, ProviderView
from mango_provider_e2b.control import ControlPlane, SandboxInfo, SandboxState
from mango_provider_e2b.envd import Envd, EnvdAddress

__all__ = ["TAKE_UP_SECONDS", "Remote"]

TAKE_UP_SECONDS = 10.0
"""How long a resume waits for the commands a pause cut to take their streams up again."""
_RESUME_POLL_SECONDS = 0.1
_RESUME_POLL_MAX_SECONDS = 2.0


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
    held: set[str] = attrs.field(factory=set)
    """Sandboxes paused through this provider instance (capability ``pause``): until their
    resume, a data call is refused (:class:`SandboxNotRunning`) instead of resuming them."""
    pauses: dict[str, int] = attrs.field(factory=dict)
    """How many pauses of each sandbox went through this instance (a command cut by one that
    was resumed before it looked knows it from this)."""
    resumes: dict[str, int] = attrs.field(factory=dict)
    """How many resumes of each sandbox went through this instance (a data call that failed
    while a concurrent one resumed the sandbox repeats itself instead of failing)."""
    _confirming: dict[str, asyncio.Lock] = attrs.field(factory=dict, repr=False)
    _resumed: dict[str, asyncio.Event] = attrs.field(factory=dict, repr=False)
    _taking_up: dict[str, list[asyncio.Future[None]]] = attrs.field(factory=dict, repr=False)
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
        self.held.discard(sandbox_id)
        self.pauses.pop(sandbox_id, None)
        self.resumes.pop(sandbox_id, None)
        self._confirming.pop(sandbox_id, None)

    def confirming(self, sandbox_id: str) -> asyncio.Lock:
        """Held while a failed data call asks the control plane and perhaps resumes: the
        calls that failed alongside it wait, then see the resume (:attr:`resumes`)."""
        return self._confirming.setdefault(sandbox_id, asyncio.Lock())

    # ------------------------------------------------------------ pause (capability ``pause``)

    async def pause(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/pause``; a paused one is a no-op (the 409)."""
        self.held.add(sandbox_id)
        self.pauses[sandbox_id] = self.pauses.get(sandbox_id, 0) + 1
        try:
            await self.control.pause(sandbox_id)
        except BaseException:
            if (await self._state_or_none(sandbox_id)) != SandboxState.PAUSED:
                self.held.discard(sandbox_id)
            raise

    async def _state_or_none(self, sandbox_id: str) -> str | None:
        with contextlib.suppress(Exception):
            return (await self.control.get(sandbox_id)).state
        return None

    async def resume(self, sandbox_id: str, *, timeout: float | None = None) -> SandboxInfo:
        """Resume (``connect``, with the idle timeout) and let cut commands take up their
        streams before returning (bounded by :data:`TAKE_UP_SECONDS`)."""
        lifetime = self.idle_timeout if timeout is None else timeout
        info = await self.control.connect(sandbox_id, timeout=lifetime)
        self.resumes[sandbox_id] = self.resumes.get(sandbox_id, 0) + 1
        self.held.discard(sandbox_id)
        event = self._resumed.pop(sandbox_id, None)
        if event is not None:
            event.set()
        waiting = self._taking_up.pop(sandbox_id, [])
        if waiting:
            await asyncio.wait(waiting, timeout=TAKE_UP_SECONDS)
        return info

    async def wait_for_resume(
        self, sandbox_id: str, until: float | None, *, pauses_seen: int
    ) -> asyncio.Future[None] | None:
        """After a command's stream was cut: ``None`` if no pause cut it (the sandbox is not
        paused, and none went through here since ``pauses_seen``); else wait until it runs
        again (a resume here wakes this at once, one elsewhere is polled for) and return a
        future to resolve once the stream is taken up.

        Raises :class:`SandboxNotFound` if it is gone, :class:`TimeoutError` at ``until``
        (the loop's clock), what the control plane raises otherwise.
        """
        loop = asyncio.get_running_loop()
        taken_up: asyncio.Future[None] = loop.create_future()
        if (await self.control.get(sandbox_id)).state != SandboxState.PAUSED:
            # Paused and resumed here before we looked: take the stream up all the same.
            return taken_up if self.pauses.get(sandbox_id, 0) != pauses_seen else None
        self._taking_up.setdefault(sandbox_id, []).append(taken_up)
        try:
            await self._until_running(sandbox_id, until)
        except BaseException:
            waiting = self._taking_up.get(sandbox_id, [])
            if taken_up in waiting:
                waiting.remove(taken_up)
            taken_up.cancel()
            raise
        return taken_up

    async def _until_running(self, sandbox_id: str, until: float | None) -> None:
        loop = asyncio.get_running_loop()
        delay = _RESUME_POLL_SECONDS
        while True:
            event = self._resumed.setdefault(sandbox_id, asyncio.Event())
            bound = delay if until is None else max(0.0, min(delay, until - loop.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), bound)
            state = (await self.control.get(sandbox_id)).state
            if state in SandboxState.GONE:
                raise self.not_found(sandbox_id)
            if state != SandboxState.PAUSED:
                return
            if until is not None and loop.time() >= until:
                raise TimeoutError
            delay = min(delay * 2, _RESUME_POLL_MAX_SECONDS)
