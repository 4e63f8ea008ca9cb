"""Helpers shared by the fake's lifecycle, execd and egress routes."""

from __future__ import annotations

import time

from aiohttp import web

__all__ = ["error", "now_ms"]


def now_ms() -> int:
    """Unix time in milliseconds (event timestamps)."""
    return int(time.time() * 1000)


def error(status: int, code: str, message: str) -> web.Response:
    """The servers' error body: ``{"code", "message"}``."""
    return web.json_response({"code": code, "message": message}, status=status)
