"""What every Daytona sandbox of one provider instance shares: its view of the provider.

:class:`DaytonaRemote` is the kit's :class:`~mango.provider.remote.ProviderView`
with the control plane (:class:`~mango_provider_daytona.api.DaytonaApi`), the
toolbox pools (one per toolbox proxy), and the sandbox states: what counts as
gone, stopped or running, how a stopped sandbox is started and waited for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

from mango.provider import (
    ConfigurationError,
    MangoError,
    ProtocolError,
    ProviderUnavailable,
)
from mango.provider.http import ApiClient
from mango.provider.remote import Presence, ProviderView
from mango_provider_daytona.api import API_TIMEOUT, USER_AGENT, DaytonaApi, Toolbox, sandbox_state
from mango_provider_daytona.layout import DEFAULT_START_TIMEOUT, PROVIDER_NAME

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "FAILED_STATES",
    "GONE_STATES",
    "PROVIDER_NAME",
    "STOPPED_STATES",
    "DaytonaRemote",
    "is_gone",
]

log = logging.getLogger(__name__)

GONE_STATES = frozenset({"destroyed", "destroying"})
"""States in which a sandbox no longer exists for mango."""
FAILED_STATES = frozenset({"error", "build_failed"})
STOPPED_STATES = frozenset({"stopped", "archived", "paused", "stopping", "archiving", "pausing"})
_SETTLING = frozenset({"stopping", "archiving", "pausing"})


def is_gone(document: Mapping[str, Any] | None, sandbox_id: str) -> bool:
    """True if a ``GET /sandbox/{id}`` answer means the sandbox is gone or its delete has begun.

    ``None`` is the API's 404. The API records a delete as ``desiredState``
    destroyed while ``state`` still says ``started`` until the runner has
    removed the container, so both count; a stopped, paused or archived
    sandbox still exists. A sandbox record for another id (looked up by id,
    answered by name: no sandbox has this id) is not this sandbox. An answer
    that is no sandbox record at all (no string ``id``) is a
    :class:`ProtocolError`: only a confirmed not-found records a loss.
    """
    if document is None:
        return True
    found = document.get("id")
    if not isinstance(found, str) or not found:
        raise ProtocolError(f"get sandbox {sandbox_id}: the answer is not a sandbox record")
    return (
        found != sandbox_id
        or sandbox_state(document) in GONE_STATES
        or str(document.get("desiredState") or "").lower() == "destroyed"
    )


@attrs.define(eq=False, kw_only=True)
class DaytonaRemote(ProviderView):
    """The kit's provider view over the Daytona API and the sandboxes' toolboxes."""

    name: str = PROVIDER_NAME
    api: DaytonaApi
    api_key: str = attrs.field(repr=False)
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    start_timeout: float = DEFAULT_START_TIMEOUT
    poll_interval: float = 0.5
    progress: Callable[[str], None] | None = attrs.field(default=None, repr=False)
    _toolboxes: dict[str, ApiClient] = attrs.field(factory=dict, init=False, repr=False)

    # ---------------------------------------------------------------- the kit's questions

    async def presence(self, sandbox_id: str) -> Presence:
        """One ``GET /sandbox/{id}``: gone (see :func:`is_gone`), started, or anything else
        (stopped, paused, archived, starting): stopped."""
        document = await self.api.get(sandbox_id)
        if document is None or is_gone(document, sandbox_id):  # None: for the type checker
            return Presence.GONE
        return Presence.RUNNING if sandbox_state(document) == "started" else Presence.STOPPED

    async def remove(self, sandbox_id: str) -> None:
        """``DELETE /sandbox/{id}`` (gone already is success)."""
        await self.api.delete(sandbox_id)

    # ---------------------------------------------------------------- toolboxes

    def toolbox(self, document: Mapping[str, Any]) -> Toolbox:
        """The toolbox of the sandbox ``document`` describes (one pool per toolbox proxy)."""
        base = document.get("toolboxProxyUrl")
        sandbox_id = document.get("id")
        if not isinstance(base, str) or not base or not isinstance(sandbox_id, str):
            raise ProtocolError("the Daytona API returned a sandbox without a toolbox address")
        base = base.rstrip("/")
        client = self._toolboxes.get(base)
        if client is None:
            client = ApiClient(
                base,
                auth_headers={"Authorization": f"Bearer {self.api_key}"},
                headers={"User-Agent": USER_AGENT, "X-Daytona-Source": USER_AGENT},
                timeout=API_TIMEOUT,
                transport=self.transport,
            )
            self._toolboxes[base] = client
        return Toolbox(client, f"/{sandbox_id}", sandbox_id)

    async def aclose(self) -> None:
        """Close the API and toolbox connections."""
        await self.api.aclose()
        for client in self._toolboxes.values():
            await client.aclose()
        self._toolboxes.clear()

    # ---------------------------------------------------------------- states

    def report(self, line: str) -> None:
        """A progress line, to :attr:`progress` or else the logger."""
        if self.progress is not None:
            self.progress(line)
        else:
            log.info("%s", line)

    async def wait_started(self, document: dict[str, Any], *, what: str) -> dict[str, Any]:
        """Start the sandbox if it is not running and wait (bounded) until it is ``started``."""
        sandbox_id = str(document["id"])
        deadline = time.monotonic() + self.start_timeout
        delay = self.poll_interval
        began = time.monotonic()
        last = ""
        waited = False
        while True:
            state = sandbox_state(document)
            if state in GONE_STATES:
                raise self.not_found(sandbox_id)
            if state == "started":
                if waited:
                    self.report(f"{what}: started after {time.monotonic() - began:.0f}s")
                return document
            if state in FAILED_STATES:
                reason = document.get("errorReason") or state
                error = ConfigurationError if state == "build_failed" else ProviderUnavailable
                raise error(f"daytona sandbox {sandbox_id} is in state {state}: {reason}")
            if state in STOPPED_STATES and state not in _SETTLING:
                if not waited:
                    self.report(f"{what}: sandbox is {state}; starting it")
                document = await self.api.start(sandbox_id)
                waited = True
                continue
            if state != last:
                self.report(f"{what}: sandbox is {state}, waiting until it is started")
                last = state
            waited = True
            if time.monotonic() >= deadline:
                raise ProviderUnavailable(
                    f"daytona sandbox {sandbox_id} is still {state} "
                    f"after {self.start_timeout:.0f}s",
                    hint="raise DAYTONA_START_TIMEOUT, or look at the sandbox in Daytona",
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            fresh = await self.api.get(sandbox_id)
            if fresh is None:
                raise self.not_found(sandbox_id)
            document = fresh

    async def resume(self, sandbox_id: str) -> None:
        """Start the sandbox if Daytona paused, stopped or archived it; restart its idle clock."""
        document = await self.api.get(sandbox_id)
        if document is None:
            raise self.not_found(sandbox_id)
        if is_gone(document, sandbox_id):
            raise self.not_found(sandbox_id)
        await self.wait_started(document, what=f"daytona sandbox {sandbox_id}")
        try:
            await self.api.touch(sandbox_id)
        except MangoError as exc:
            # Older APIs have no activity call (a 404 there is no loss: the GET above
            # saw the sandbox); the start above is the keep-alive.
            log.debug("could not refresh the activity of %s: %s", sandbox_id, exc)
