"""The error map of the remote kit: an httpx answer or exception as a mango error.

Also :func:`json_answer`, the one parse of an answer's JSON document.

Split from :mod:`mango.provider.http` (the client) so that each module has one
job; every name here is re-exported there, which is where adapters import
them from. The table of what maps to what is in that module's docstring.
Messages name the operation, the method and the URL *path* only, and every
secret the caller names is blanked out of the body excerpt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from mango.domain.errors import (
    ConfigurationError,
    ProtocolError,
    RemoteRejected,
    RemoteUnavailable,
    ResourceConflict,
    SandboxNotFound,
)
from mango.provider.retries import parse_retry_after

__all__ = ["check_response", "json_answer", "map_httpx_exceptions", "request_where"]

_EXCERPT_CHARS = 200
_REDACTED = "***"
# Secrets shorter than this are not blanked: replacing every "a" in a body would
# destroy the excerpt, and such a value is not a credential anyone issues.
_MIN_SECRET_LENGTH = 4


def _redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, _REDACTED)
    return text


def _excerpt(response: httpx.Response, secrets: Iterable[str]) -> str:
    try:
        raw = response.content[: _EXCERPT_CHARS * 4]
    except httpx.ResponseNotRead:
        return ""
    text = raw.decode("utf-8", "replace")
    # Redact before shortening, so a secret cut in half by the limit still goes.
    text = _redact(text, secrets)
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text[:_EXCERPT_CHARS]


def request_where(request: httpx.Request) -> str:
    """``METHOD scheme://host/path``: never the query string, which may carry an API key."""
    return (
        f"{request.method} {request.url.scheme}://{request.url.netloc.decode()}{request.url.path}"
    )


def check_response(
    response: httpx.Response,
    *,
    operation: str,
    sandbox_id: str | None = None,
    secrets: Iterable[str] = (),
) -> httpx.Response:
    """Return ``response`` if it succeeded (2xx), else raise the mapped error.

    ``operation`` names the call in messages (``"get sandbox"``).
    ``sandbox_id`` says the request names a sandbox resource: only then is a
    404 a :class:`SandboxNotFound`. ``secrets`` are blanked out of the body
    excerpt. A streamed response must have been read first.
    """
    status = response.status_code
    if 200 <= status < 300:
        return response
    secrets = tuple(secrets)
    where = request_where(response.request)
    excerpt = _excerpt(response, secrets)
    detail = f": {excerpt}" if excerpt else ""
    error: Exception
    if status == 404 and sandbox_id is not None:
        error = SandboxNotFound(f"{operation}: sandbox {sandbox_id!r} not found ({where})")
    elif status in (401, 403):
        error = ConfigurationError(
            f"{operation}: the provider refused the credentials (HTTP {status}, {where})",
            hint="check the API key or token setting of this provider",
        )
    elif status == 409:
        error = ResourceConflict(f"{operation}: conflict (HTTP 409, {where}){detail}")
    elif status == 429 or status >= 500:
        error = RemoteUnavailable(
            f"{operation}: HTTP {status} ({where}){detail}",
            status=status,
            retry_after=parse_retry_after(response.headers.get("retry-after")),
        )
    elif status == 404:
        error = RemoteUnavailable(
            f"{operation}: HTTP 404 on a route that should exist ({where}); "
            f"wrong base URL or API version?{detail}",
            status=status,
        )
    elif status < 400:
        # Redirects are not followed and 1xx never ends a request: either means
        # the base URL points at something other than the vendor's API.
        error = RemoteUnavailable(
            f"{operation}: unexpected HTTP {status} ({where}); wrong base URL?", status=status
        )
    else:
        error = RemoteRejected(
            f"{operation}: HTTP {status} ({where}){detail}", status=status, excerpt=excerpt
        )
    raise error from None


@contextmanager
def map_httpx_exceptions(operation: str, *, secrets: Iterable[str] = ()) -> Iterator[None]:
    """Translate httpx exceptions raised inside the block into :class:`RemoteUnavailable`.

    Timeouts, transport errors (connect, read, write, protocol, proxy) and
    undecodable bodies become retryable; the message names the exception
    type and its credential-free text. An invalid or non-HTTP URL and other
    httpx errors are configuration mistakes: :class:`ConfigurationError`.
    """
    try:
        yield
    except httpx.TimeoutException as exc:
        raise RemoteUnavailable(
            f"{operation}: timed out ({type(exc).__name__}: {_redact(str(exc), secrets)})"
        ) from exc
    except (httpx.InvalidURL, httpx.UnsupportedProtocol):
        # The configured base URL is unusable; no retry can fix it. No text:
        # httpx quotes the URL, which may carry a key.
        raise ConfigurationError(
            f"{operation}: the provider's base URL is invalid or not http(s)"
        ) from None
    except (httpx.TransportError, httpx.DecodingError) as exc:
        raise RemoteUnavailable(
            f"{operation}: transport failure ({type(exc).__name__}: {_redact(str(exc), secrets)})"
        ) from exc
    except httpx.HTTPError as exc:
        raise ConfigurationError(
            f"{operation}: {type(exc).__name__}: {_redact(str(exc), secrets)}"
        ) from None


def json_answer(
    response: httpx.Response,
    *,
    operation: str,
    shape: type[dict[Any, Any]] | type[list[Any]] | None = None,
) -> Any:
    """The JSON document of a read ``response``; :class:`ProtocolError` if it is not one.

    ``shape`` (``dict`` or ``list``) is the top-level type the API promises;
    another one is a protocol error as well. The message names the operation
    and the status, and quotes a short, printable start of the body.
    """
    try:
        value = json.loads(response.content) if response.content else None
    except ValueError:
        value = _NOT_JSON
    except httpx.ResponseNotRead:  # pragma: no cover - a streamed answer must be read first
        raise ProtocolError(f"{operation}: the answer was not read") from None
    if value is _NOT_JSON or value is None:
        start = response.content[:60].decode("utf-8", "replace")
        start = "".join(ch if ch.isprintable() else " " for ch in start).strip()
        shown = f": {start!r}" if start else " (an empty body)"
        raise ProtocolError(
            f"{operation}: the answer is not JSON (HTTP {response.status_code}){shown}",
            status=response.status_code,
        )
    if shape is not None and not isinstance(value, shape):
        raise ProtocolError(
            f"{operation}: the answer is a JSON {type(value).__name__}, not a JSON "
            f"{'object' if shape is dict else 'array'} (HTTP {response.status_code})",
            status=response.status_code,
        )
    return value


_NOT_JSON = object()
