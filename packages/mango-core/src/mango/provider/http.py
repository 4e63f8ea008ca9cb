"""httpx error map and retries for remote provider adapters.

Every remote adapter (E2B, Cube, OpenSandbox, Daytona) talks HTTP through
httpx. This module is the one place where httpx responses and exceptions
become the mango error tree, as httpx's own ``map_httpcore_exceptions`` does
for httpcore:

====================================  =========================================
what came back                        what is raised
====================================  =========================================
404 on a request naming a sandbox     :class:`SandboxNotFound`
404 on any other route                :class:`RemoteUnavailable` (wrong base URL
                                      or API version: a protocol error)
401, 403                              :class:`ConfigurationError` (credential-free)
409                                   :class:`ResourceConflict`
429, 5xx                              :class:`RemoteUnavailable` (``retry_after``)
1xx, 3xx (redirects are not followed) :class:`RemoteUnavailable` (wrong base URL?)
``httpx.TimeoutException``,           :class:`RemoteUnavailable`
``httpx.TransportError``
any other 4xx                         :class:`RemoteRejected` (status + excerpt)
====================================  =========================================

Messages name the operation, the method and the URL *path* only: never a
header, never a query string, and any secret the client knows is blanked out
of the body excerpt. Status errors are raised ``from None`` (httpx's own
``HTTPStatusError`` text contains the full URL, query included).

Retries are :mod:`mango.provider.retries`' (stamina: bounded attempts and
total time, backoff with jitter, ``Retry-After`` honoured): only
:class:`ProviderUnavailable` is retried, and only for idempotent calls unless
the caller says otherwise. Its names, and :class:`PinnedTransport`
(:mod:`mango.provider.transports`), are re-exported here.

Every answer mango parses is read with a bound (:data:`MAX_ANSWER_BYTES`
unless the call gives its own ``max_bytes``): past it the answer is a
:class:`ProtocolError`, and no gigabyte body ever lands in memory.
:func:`json_answer` parses one: a body that is not JSON, or not the JSON
shape asked for, is a :class:`ProtocolError` too, never a raw ``ValueError``.
Every attempt also has an overall deadline (``deadline``, by default twice
the client's ``timeout``): httpx's timeouts bound each read, so a server that
trickles one byte at a time would hold a call for ever without it. A
streamed call's deadline covers its headers; its body is the caller's to
bound.

Prefer header authentication: httpx's own INFO log line prints the request
URL, query string included, so a key carried in a query parameter reaches
logs whenever the ``httpx`` logger is at INFO.

This module imports httpx and stamina (the ``remote`` extra of mango-core);
``import mango.provider`` does not import it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx

from mango.domain.errors import (
    ProtocolError,
    RemoteRejected,
    RemoteUnavailable,
)
from mango.provider.http_errors import (
    check_response,
    json_answer,
    map_httpx_exceptions,
    request_where,
)
from mango.provider.retries import DEFAULT_RETRY_POLICY, RetryPolicy, parse_retry_after, retrying
from mango.provider.transports import PinnedTransport

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "IDEMPOTENT_METHODS",
    "MAX_ANSWER_BYTES",
    "ApiClient",
    "PinnedTransport",
    "ProtocolError",
    "RemoteRejected",
    "RemoteUnavailable",
    "RetryPolicy",
    "check_response",
    "json_answer",
    "map_httpx_exceptions",
    "parse_retry_after",
    "retrying",
    "transfer_deadline",
]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""Methods retried by default (RFC 9110 §9.2.2); POST and PATCH only on request."""
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""Bound of a buffered answer: control-plane and daemon JSON documents are a few KiB."""
_ERROR_BODY_BYTES = 64 * 1024
_DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_TRANSFER_RATE = 1024 * 1024
"""Bytes per second an upload is granted at least by :func:`transfer_deadline`."""


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _may_retry(method: str, idempotent: bool | None, kwargs: Mapping[str, Any]) -> bool:
    content = kwargs.get("content")
    if content is not None and not isinstance(content, str | bytes):
        # A streamed request body is consumed by the first attempt; it cannot be replayed.
        return False
    return method.upper() in IDEMPOTENT_METHODS if idempotent is None else idempotent


def transfer_deadline(size: int, *, base: float = 60.0) -> float:
    """An overall deadline for moving ``size`` bytes: ``base`` plus one second per MiB."""
    return base + max(0, size) / _TRANSFER_RATE


def _plain_headers(
    response: httpx.Response, *, only: frozenset[str] | None = None
) -> list[tuple[str, str]]:
    # The body is handed on decoded: its encoding and framing headers no longer apply.
    return [
        (key, value)
        for key, value in response.headers.multi_items()
        if key.lower() not in _DROPPED_HEADERS and (only is None or key.lower() in only)
    ]


async def _read_error(response: httpx.Response, limit: int) -> httpx.Response:
    """A streamed error answer as a read one: at most ``limit`` bytes of its body, then closed."""
    try:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) >= limit:
                break
    finally:
        await response.aclose()
    # Only what the error map reads: the status, Retry-After, the (decoded) body.
    return httpx.Response(
        response.status_code,
        headers=_plain_headers(response, only=frozenset({"retry-after"})),
        content=bytes(body[:limit]),
        request=response.request,
    )


async def _read_bounded(response: httpx.Response, limit: int, operation: str) -> httpx.Response:
    """A streamed answer read whole, if it is at most ``limit`` bytes; else a ProtocolError."""
    where = request_where(response.request)
    too_large = ProtocolError(
        f"{operation}: the answer is larger than {limit} bytes ({where}), "
        "more than this call ever reads",
        status=response.status_code,
    )
    try:
        declared = response.headers.get("content-length", "")
        if declared.strip().isdigit() and int(declared) > limit:
            raise too_large
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise too_large
    finally:
        await response.aclose()
    return httpx.Response(
        response.status_code,
        headers=_plain_headers(response),
        content=bytes(body),
        request=response.request,
    )


@attrs.define(eq=False)
class ApiClient:
    """One connection pool to one remote API, with its credentials and the error map.

    ``auth_headers`` are sent on every request and kept in this object only:
    they are blanked from error excerpts and never appear in ``repr``.
    ``secrets`` adds further values to blank (a token carried in a query
    parameter, say). One instance per provider instance; close it with
    :meth:`aclose` (or ``async with``).

    ``timeout`` is httpx's per-operation timeout in seconds; ``deadline`` the
    overall bound of one attempt (default: twice ``timeout``); ``retry`` the
    budget for idempotent calls. ``transport`` is for tests and proxies.
    """

    base_url: str
    auth_headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    headers: Mapping[str, str] = attrs.field(factory=dict)
    timeout: float = 30.0
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    secrets: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple, repr=False)
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    deadline: float | None = None
    _client: httpx.AsyncClient = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={**self.headers, **self.auth_headers},
            timeout=self.timeout,
            transport=self.transport,
        )

    @property
    def _secrets(self) -> tuple[str, ...]:
        values = [*self.auth_headers.values(), *self.secrets]
        # "Bearer <token>": a vendor may echo the bare token, so blank that too.
        values += [value.split(" ", 1)[1] for value in values if " " in value.strip()]
        return tuple(sorted(set(values), key=len, reverse=True))

    def check(
        self, response: httpx.Response, *, operation: str, sandbox_id: str | None = None
    ) -> httpx.Response:
        """:func:`check_response` with this client's secrets blanked: for an ``expected``
        answer the caller looked at and decided to map after all."""
        return check_response(
            response, operation=operation, sandbox_id=sandbox_id, secrets=self._secrets
        )

    @property
    def default_deadline(self) -> float:
        """The overall bound of one attempt when a call names none (seconds)."""
        return self.deadline if self.deadline is not None else 2 * self.timeout

    async def request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        sandbox_id: str | None = None,
        idempotent: bool | None = None,
        retry: RetryPolicy | None = None,
        expected: Iterable[int] = (),
        max_bytes: int = MAX_ANSWER_BYTES,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one request (retried if idempotent) and return the successful, read response.

        ``kwargs`` go to :meth:`httpx.AsyncClient.request` (``params``, ``json``,
        ``content``, ``headers``, ``timeout``). ``idempotent`` defaults by
        method (:data:`IDEMPOTENT_METHODS`); pass ``True`` for a POST the API
        makes safe to repeat. A streamed ``content`` (an iterator) is never
        retried: it cannot be replayed. Errors as in :func:`check_response`,
        except for the ``expected`` statuses, which are returned as answers
        (a 404 that means "no such file", say). The body is read with the
        bound ``max_bytes`` (:class:`ProtocolError` past it) within
        ``deadline`` seconds (default :attr:`default_deadline`; ``math.inf``
        only for a call that legitimately runs as long as a command).
        """
        return await self._send(
            method,
            path,
            operation=operation,
            sandbox_id=sandbox_id,
            idempotent=idempotent,
            retry=retry,
            expected=expected,
            stream=False,
            max_bytes=max_bytes,
            deadline=deadline,
            kwargs=kwargs,
        )

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        sandbox_id: str | None = None,
        idempotent: bool | None = None,
        retry: RetryPolicy | None = None,
        error_body_limit: int = _ERROR_BODY_BYTES,
        expected: Iterable[int] = (),
        deadline: float | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[httpx.Response]:
        """Open a streamed response (``async with client.stream(...) as response``).

        Opening is retried like :meth:`request` and bounded by ``deadline``
        (the headers must arrive by then); once the block has the response
        nothing is retried, and transport errors while reading the body raise
        :class:`RemoteUnavailable`. An error status is read (at most
        ``error_body_limit`` bytes) and mapped before the block runs, except
        for the ``expected`` statuses, which the block receives. The response
        is closed when the block ends.
        """
        response = await self._send(
            method,
            path,
            operation=operation,
            sandbox_id=sandbox_id,
            idempotent=idempotent,
            retry=retry,
            expected=expected,
            stream=True,
            max_bytes=error_body_limit,
            deadline=deadline,
            kwargs=kwargs,
        )
        try:
            with map_httpx_exceptions(operation, secrets=self._secrets):
                yield response
        finally:
            await response.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        sandbox_id: str | None,
        idempotent: bool | None,
        retry: RetryPolicy | None,
        expected: Iterable[int],
        stream: bool,
        max_bytes: int,
        deadline: float | None,
        kwargs: Mapping[str, Any],
    ) -> httpx.Response:
        """One request, retried within the policy if it may be: the answer, or the mapped error.

        Every answer is read from a stream: an error (at most
        :data:`_ERROR_BODY_BYTES`, or ``max_bytes`` for a streamed call) and a
        buffered success or expected answer (at most ``max_bytes``, else a
        :class:`ProtocolError`) are read and closed here; a streamed success
        is returned open. Each attempt ends within ``deadline``.
        """
        secrets = self._secrets
        answers = frozenset(expected)
        bound = self.default_deadline if deadline is None else deadline

        async def attempt(request: httpx.Request) -> httpx.Response:
            with map_httpx_exceptions(operation, secrets=secrets):
                response = await self._client.send(request, stream=True)
                if response.is_success or response.status_code in answers:
                    if stream:
                        return response
                    return await _read_bounded(response, max_bytes, operation)
                response = await _read_error(response, max_bytes if stream else _ERROR_BODY_BYTES)
            return check_response(
                response, operation=operation, sandbox_id=sandbox_id, secrets=secrets
            )

        async def once() -> httpx.Response:
            with map_httpx_exceptions(operation, secrets=secrets):
                request = self._client.build_request(method, path, **kwargs)
            try:
                async with asyncio.timeout(None if math.isinf(bound) else bound):
                    return await attempt(request)
            except TimeoutError:
                raise RemoteUnavailable(
                    f"{operation}: no complete answer within {bound:g} s ({request_where(request)})"
                ) from None

        return await retrying(
            once, policy=retry or self.retry, retry=_may_retry(method, idempotent, kwargs)
        )

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        await self._client.aclose()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()
