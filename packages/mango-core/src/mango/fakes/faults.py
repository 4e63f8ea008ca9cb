"""Fault injection for fake services, settable from a test while the service runs.

:class:`Faults` is an aiohttp middleware plus a small API. Every rule
matches by HTTP method and by route: either the route's template as
registered (``"/sandboxes/{id}"``) or the concrete path (``"/sandboxes/sbx-1"``);
``None`` matches anything. Kinds:

* :meth:`Faults.fail` answers the next ``times`` matching requests with a
  status (503 by default) *without* running the handler;
* :meth:`Faults.delay` holds matching requests before the handler runs
  (released early when the service stops);
* :meth:`Faults.drop_after_commit` runs the handler (the action happens) and
  then aborts the connection without a response: the client's "lost
  response" case.

Every request is recorded (:attr:`Faults.log`, :meth:`Faults.count`), so a
test can assert, say, that no create call was made. Deleting or pausing a
sandbox behind the client's back goes through the service's
:class:`~mango.fakes.sandboxes.FakeSandboxes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable, Mapping

import attrs
from aiohttp import web

from mango.fakes.wire import cut_connection

__all__ = ["Faults", "RecordedRequest"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Kind(enum.Enum):
    FAIL = "fail"
    DELAY = "delay"
    DROP = "drop"


@attrs.frozen
class RecordedRequest:
    """One request the service received: method, route template and concrete path."""

    method: str
    route: str
    path: str


def _route_of(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


@attrs.define
class _Rule:
    kind: _Kind
    method: str | None
    path: str | None
    remaining: int | None
    status: int = 503
    body: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    seconds: float = 0.0

    def matches(self, record: RecordedRequest) -> bool:
        if self.method is not None and self.method.upper() != record.method:
            return False
        return self.path is None or self.path in (record.route, record.path)

    def take(self) -> None:
        if self.remaining is not None:
            self.remaining -= 1


@attrs.define(eq=False)
class Faults:
    """The faults of one fake service and the record of what it received."""

    log: list[RecordedRequest] = attrs.field(factory=list)
    """Every request received, in order (faulted ones included)."""
    _rules: list[_Rule] = attrs.field(factory=list, repr=False)
    _closing: asyncio.Event = attrs.field(factory=asyncio.Event, repr=False)

    def fail(
        self,
        status: int = 503,
        *,
        times: int | None = 1,
        method: str | None = None,
        path: str | None = None,
        body: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests (``None``: all) with ``status``."""
        self._rules.append(
            _Rule(
                _Kind.FAIL,
                method,
                path,
                times,
                status=status,
                body=body,
                headers=dict(headers or {}),
            )
        )

    def delay(
        self,
        seconds: float,
        *,
        times: int | None = None,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Hold matching requests ``seconds`` before the handler runs."""
        self._rules.append(_Rule(_Kind.DELAY, method, path, times, seconds=seconds))

    def drop_after_commit(
        self, *, times: int | None = 1, method: str | None = None, path: str | None = None
    ) -> None:
        """Run the handler of the next ``times`` matching requests, then drop the connection."""
        self._rules.append(_Rule(_Kind.DROP, method, path, times))

    def clear(self) -> None:
        """Remove every rule (the log stays)."""
        self._rules.clear()

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """How many requests matched ``method`` and ``path`` (template or concrete)."""
        probe = _Rule(_Kind.FAIL, method, path, None)
        return sum(1 for record in self.log if probe.matches(record))

    def release(self) -> None:
        """End every delay now (called when the service stops)."""
        self._closing.set()

    def rearm(self) -> None:
        """Let delays hold requests again (called when the service starts)."""
        self._closing.clear()

    def _take(self, kind: _Kind, record: RecordedRequest) -> _Rule | None:
        for rule in self._rules:
            if rule.kind is kind and rule.remaining != 0 and rule.matches(record):
                rule.take()
                return rule
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The aiohttp middleware that applies the rules (installed by the service)."""
        record = RecordedRequest(request.method, _route_of(request), request.path)
        self.log.append(record)
        delay = self._take(_Kind.DELAY, record)
        if delay is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay.seconds)
        failure = self._take(_Kind.FAIL, record)
        if failure is not None:
            return web.Response(status=failure.status, text=failure.body, headers=failure.headers)
        drop = self._take(_Kind.DROP, record)
        response = await handler(request)
        if drop is not None:
            cut_connection(request)  # the action is committed; the client never learns it
        return response
