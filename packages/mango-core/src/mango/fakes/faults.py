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
  response" case;
* :meth:`Faults.hostile` answers with one of the :class:`Hostile` answers
  (an HTML 500 page, truncated JSON, JSON of the wrong shape or types, a 200
  that is not JSON, a redirect, a 429 with ``Retry-After``, a body of any
  size, a body trickled one byte at a time) without running the handler:
  the same bad answers for every vendor fake;
* :meth:`Faults.cut_in_flight` aborts the connections of the matching
  requests that are being handled right now (a proxy's reset while a daemon
  runs a command); the handler goes on, as a daemon's does.

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

__all__ = ["Faults", "Hostile", "RecordedRequest"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Kind(enum.Enum):
    FAIL = "fail"
    DELAY = "delay"
    DROP = "drop"
    HOSTILE = "hostile"


class Hostile(enum.Enum):
    """Bad answers a broken proxy, a wrong base URL or a hostile server gives."""

    HTML_500 = "html-500"
    """HTTP 500 with an HTML error page (a proxy's, not the vendor's JSON error)."""
    TRUNCATED_JSON = "truncated-json"
    """HTTP 200 ``application/json`` whose document stops half-way."""
    WRONG_SHAPE = "wrong-shape"
    """HTTP 200 with a JSON object of another call (``{"sandboxes": []}``): no id, no record."""
    WRONG_TYPES = "wrong-types"
    """HTTP 200 with the expected keys holding values of the wrong JSON types."""
    NOT_JSON = "not-json"
    """HTTP 200 ``text/plain``: ``OK``."""
    REDIRECT = "redirect"
    """HTTP 302 to another host."""
    RATE_LIMITED = "rate-limited"
    """HTTP 429 with ``Retry-After: 1``."""
    HUGE = "huge"
    """HTTP 200 ``application/json``, chunked, of ``size`` bytes (a JSON array of zeros)."""
    TRICKLE = "trickle"
    """HTTP 200 ``application/json`` sent one byte every ``interval`` seconds, for ever."""


_HTML_500 = (
    "<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head>"
    "<body><h1>Internal Server Error</h1><p>upstream connect error</p></body></html>"
)
_WRONG_TYPES = (
    '{"id": 7, "sandboxID": 7, "name": false, "state": ["running"], "status": 3, '
    '"metadata": "none", "labels": 5, "items": "none", "pagination": [], '
    '"entry": "file", "exitCode": "zero", "result": 1, "dir": 2, "endpoint": 4}'
)
_HUGE_CHUNK = b"0," * 32768
_JSON = "application/json"
_FIXED_ANSWERS: dict[Hostile, tuple[int, str, str, dict[str, str]]] = {
    Hostile.HTML_500: (500, _HTML_500, "text/html", {}),
    Hostile.TRUNCATED_JSON: (200, '{"id": "sbx-1", "sandboxID": "sbx-1", "sta', _JSON, {}),
    Hostile.WRONG_SHAPE: (200, '{"sandboxes": []}', _JSON, {}),
    Hostile.WRONG_TYPES: (200, _WRONG_TYPES, _JSON, {}),
    Hostile.NOT_JSON: (200, "OK", "text/plain", {}),
    Hostile.REDIRECT: (302, "", "text/plain", {"Location": "http://127.0.0.1:9/elsewhere"}),
    Hostile.RATE_LIMITED: (429, '{"message": "slow down"}', _JSON, {"Retry-After": "1"}),
}


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
    hostile: Hostile | None = None
    size: int = 0

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
    _in_flight: dict[int, tuple[web.Request, RecordedRequest]] = attrs.field(
        factory=dict, repr=False
    )

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

    def hostile(
        self,
        answer: Hostile,
        *,
        times: int | None = 1,
        method: str | None = None,
        path: str | None = None,
        size: int = 64 * 1024 * 1024,
        interval: float = 0.5,
    ) -> None:
        """Answer the next ``times`` matching requests (``None``: all) with ``answer``.

        ``size`` is the body size of :attr:`Hostile.HUGE`, ``interval`` the
        seconds between the bytes of :attr:`Hostile.TRICKLE`.
        """
        self._rules.append(
            _Rule(_Kind.HOSTILE, method, path, times, hostile=answer, size=size, seconds=interval)
        )

    def cut_in_flight(self, *, method: str | None = None, path: str | None = None) -> int:
        """Abort the connection of every matching request being handled now; return how many.

        The handlers are not stopped by this (a daemon behind a proxy goes on);
        only the client loses its answer.
        """
        probe = _Rule(_Kind.FAIL, method, path, None)
        cut = 0
        for request, record in list(self._in_flight.values()):
            if probe.matches(record):
                cut_connection(request)
                cut += 1
        return cut

    def in_flight(self, *, method: str | None = None, path: str | None = None) -> int:
        """How many matching requests are being handled now."""
        probe = _Rule(_Kind.FAIL, method, path, None)
        return sum(1 for _request, record in self._in_flight.values() if probe.matches(record))

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
        hostile = self._take(_Kind.HOSTILE, record)
        if hostile is not None and hostile.hostile is not None:
            return await self._hostile(request, hostile)
        drop = self._take(_Kind.DROP, record)
        self._in_flight[id(request)] = (request, record)
        try:
            response = await handler(request)
        finally:
            self._in_flight.pop(id(request), None)
        if drop is not None:
            cut_connection(request)  # the action is committed; the client never learns it
        return response

    async def _hostile(self, request: web.Request, rule: _Rule) -> web.StreamResponse:
        answer = rule.hostile
        fixed = _FIXED_ANSWERS.get(answer) if answer is not None else None
        if fixed is not None:
            status, text, content_type, headers = fixed
            return web.Response(
                status=status, text=text, headers={"Content-Type": content_type, **headers}
            )
        json_type = "application/json"
        response = web.StreamResponse(headers={"Content-Type": json_type})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            if answer is Hostile.HUGE:
                await response.write(b"[")
                sent = 1
                while sent < rule.size - 1:
                    chunk = _HUGE_CHUNK[: rule.size - 1 - sent]
                    await response.write(chunk)
                    sent += len(chunk)
                await response.write(b"]")
            else:  # TRICKLE: a document that never ends, one byte at a time
                while not self._closing.is_set():
                    await response.write(b" ")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), rule.seconds)
            await response.write_eof()
        return response
