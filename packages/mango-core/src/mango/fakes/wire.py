"""Small wire rules that every vendor fake needs: times, label maps, a connection cut short."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeGuard

from aiohttp import web

__all__ = ["cut_connection", "is_string_map", "rfc3339"]


def rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with a ``Z`` (how the vendors' Go services write times)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def is_string_map(value: object) -> TypeGuard[dict[str, str]]:
    """Whether ``value`` is a JSON object of strings to strings (labels, metadata)."""
    return isinstance(value, dict) and all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    )


def cut_connection(request: web.Request) -> None:
    """End ``request``'s connection now, without the rest of its response.

    What a client sees when the vendor's daemon dies mid-answer (its sandbox
    was deleted under a running command: the proxy in front aborts the
    response) or when a response is lost after the action was committed.
    aiohttp treats the handler's next write as a client disconnect.
    """
    if request.transport is not None:
        request.transport.abort()
