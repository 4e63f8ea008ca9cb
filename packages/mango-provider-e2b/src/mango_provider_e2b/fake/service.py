"""The fake E2B service: sandboxes with lifecycle timers, their processes, test controls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import (
    FakeSandbox,
    FakeService,
    SandboxState,
    continue_marked,
    kill_marked,
    stop_marked,
)
from mango_provider_e2b.fake.api import ControlPlane
from mango_provider_e2b.fake.common import PROCESSES
from mango_provider_e2b.fake.config import FakeConfig
from mango_provider_e2b.fake.envd import Envd
from mango_provider_e2b.fake.ports import route_ports
from mango_provider_e2b.fake.processes import FakeProcess

__all__ = ["E2BFakeService"]


@attrs.define(eq=False)
class E2BFakeService(FakeService):
    """The scaffold's :class:`~mango.fakes.FakeService` serving the E2B routes of ``config``.

    What it speaks and how: see :mod:`mango_provider_e2b.fake`.
    """

    config: FakeConfig = attrs.field(factory=FakeConfig, kw_only=True)
    _timers: dict[str, asyncio.TimerHandle] = attrs.field(factory=dict, init=False, repr=False)
    _deleting: set[asyncio.Future[Any]] = attrs.field(factory=set, init=False, repr=False)
    _changed: asyncio.Condition = attrs.field(factory=asyncio.Condition, init=False, repr=False)
    stopping: asyncio.Event = attrs.field(factory=asyncio.Event, init=False, repr=False)
    """Set when the service stops (a hung stream ends then)."""
    _paused: dict[str, asyncio.Event] = attrs.field(factory=dict, init=False, repr=False)
    cut_streams: int = attrs.field(default=0, init=False)
    """How many ``Connect`` streams the edge cut at ``config.connect_deadline`` (for tests)."""

    @classmethod
    def create(
        cls, scratch_dir: Path | str, config: FakeConfig | None = None, **options: Any
    ) -> E2BFakeService:
        """A service over ``scratch_dir`` serving the routes of ``config``."""
        return cls(scratch_dir, _routes, config=config or FakeConfig(), **options)

    def build_app(self) -> web.Application:
        """The scaffold's application with the client-proxy's port routing in front of the
        routes (a request for a sandbox's own port never reaches the API or envd)."""
        app = super().build_app()
        app.middlewares.append(route_ports)
        return app

    # ------------------------------------------------------------ test controls

    def processes(self, sandbox_id: str) -> dict[int, FakeProcess]:
        """The processes the fake envd started in ``sandbox_id`` (still running or not)."""
        record = self.sandboxes.find(sandbox_id)
        if record is None:
            return {}
        table: dict[int, FakeProcess] = record.extra.setdefault(PROCESSES, {})
        return table

    async def delete_sandbox(self, sandbox_id: str) -> bool:
        """Delete a sandbox (killing its processes): also how a test deletes one behind mango."""
        for process in self.processes(sandbox_id).values():
            process.kill_tree()
        self._cancel_timer(sandbox_id)
        deleted = await self.sandboxes.delete(sandbox_id)
        self.notify_change()
        return deleted

    def pause_sandbox(self, sandbox_id: str, *, memory: bool = True) -> None:
        """Pause a sandbox now (as its idle timeout would).

        ``memory=False`` is E2B's filesystem-only snapshot (``autoPauseMemory:
        false``): the sandbox's processes die and its resume is a cold boot.
        """
        self._cancel_timer(sandbox_id)
        record = self.sandboxes.pause(sandbox_id)
        # The VM stops: every process in it stops where it is (memory kept, or lost
        # below), and the edge drops every envd stream of the sandbox.
        stop_marked(sandbox_id)
        self.paused_signal(sandbox_id).set()
        if not memory:
            record.extra["cold_boot_due"] = True
            for process in self.processes(sandbox_id).values():
                process.kill_tree()
            # Every process of the VM dies, also those that left envd's tree (setsid, a
            # supervisor reparented to init): the ones the fake marked as this sandbox's.
            kill_marked(sandbox_id)
        self.notify_change()

    def resume_sandbox(self, sandbox_id: str) -> None:
        """Resume a paused sandbox (cold-booted if its pause kept the filesystem only)."""
        record = self.sandboxes.resume(sandbox_id)
        if record.extra.pop("cold_boot_due", False):
            record.extra["cold_boots"] = record.extra.get("cold_boots", 0) + 1
        self._paused.pop(sandbox_id, None)
        continue_marked(sandbox_id)
        self.notify_change()

    def paused_signal(self, sandbox_id: str) -> asyncio.Event:
        """Set while ``sandbox_id`` is paused (its envd streams are cut when it is)."""
        return self._paused.setdefault(sandbox_id, asyncio.Event())

    def cold_boots(self, sandbox_id: str) -> int:
        """How often the sandbox was resumed from a filesystem-only snapshot (memory lost)."""
        record = self.sandboxes.find(sandbox_id)
        return 0 if record is None else int(record.extra.get("cold_boots", 0))

    def place(self, sandbox_id: str, node: int) -> None:
        """Cube mode: move the sandbox's record to ``node`` (its list's ``limit`` counts nodes)."""
        self.sandboxes.get(sandbox_id).extra["node"] = node

    def state(self, sandbox_id: str) -> str | None:
        """``running``, ``paused``, ``deleted`` or ``None`` (never existed)."""
        record = self.sandboxes.find(sandbox_id)
        return None if record is None else record.state.value

    async def wait_for_state(self, sandbox_id: str, state: str, *, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the sandbox is in ``state``; False if not."""
        return await self.wait_until(lambda: self.state(sandbox_id) == state, timeout=timeout)

    async def wait_until(self, condition: Callable[[], bool], *, timeout: float) -> bool:
        """Wait until ``condition()`` holds (re-checked on every lifecycle change and start)."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(condition)
            except TimeoutError:
                return False
        return True

    def notify_change(self) -> None:
        """Have :meth:`wait_until` re-check its condition (the routes call it on every change)."""

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = asyncio.ensure_future(notify())
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    def end_at(self, sandbox_id: str) -> datetime | None:
        """When the sandbox pauses (or dies) unless someone extends it."""
        record = self.sandboxes.find(sandbox_id)
        return None if record is None else record.extra.get("end_at")

    async def stop(self) -> None:
        """Kill every process, then stop the kit's service."""
        self.stopping.set()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for record in self.sandboxes.list():
            for process in self.processes(record.id).values():
                process.kill_tree()
        await super().stop()

    # ------------------------------------------------------------ lifecycle timers

    def _cancel_timer(self, sandbox_id: str) -> None:
        handle = self._timers.pop(sandbox_id, None)
        if handle is not None:
            handle.cancel()

    def arm_timeout(self, record: FakeSandbox, seconds: float) -> None:
        """Restart the sandbox's timeout: it pauses or is deleted ``seconds`` from now."""
        self._cancel_timer(record.id)
        record.extra["end_at"] = datetime.now(UTC) + timedelta(seconds=seconds)
        loop = asyncio.get_running_loop()
        self._timers[record.id] = loop.call_later(seconds, self._expire, record.id)

    def _expire(self, sandbox_id: str) -> None:
        self._timers.pop(sandbox_id, None)
        record = self.sandboxes.find(sandbox_id)
        if record is None or record.state is not SandboxState.RUNNING:
            return
        if record.extra.get("auto_pause"):
            self.pause_sandbox(sandbox_id, memory=record.extra.get("pause_memory", True))
        else:
            task = asyncio.ensure_future(self.delete_sandbox(sandbox_id))
            self._deleting.add(task)
            task.add_done_callback(self._deleting.discard)


def _routes(service: FakeService) -> Iterable[web.AbstractRouteDef]:
    if not isinstance(service, E2BFakeService):
        raise TypeError("the E2B routes need an E2BFakeService")
    return [*ControlPlane(service).routes(), *Envd(service).routes()]
