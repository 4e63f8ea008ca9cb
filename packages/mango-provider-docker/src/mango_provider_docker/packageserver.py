"""A package server for tests: the test repositories (:mod:`.repository`) over HTTP.

The package tests start one on the Docker bridge's host address
(:func:`~mango_provider_docker.testimages.bridge_gateway`) and point an
image's sources at it (:func:`~mango_provider_docker.testimages.served_sources`).
:meth:`PackageServer.hold` keeps one file back until the test releases it,
so a test can act while a package manager is waiting for it (kill the
worker, watch its progress) without timing anything.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Iterable

import attrs
from aiohttp import web

from mango_provider_docker.repository import apt_repository, pip_repository

__all__ = ["PackageServer"]


@attrs.define(eq=False)
class PackageServer:
    """Serves ``files`` (path -> bytes) over HTTP; :meth:`hold` delays one path until released."""

    files: dict[str, bytes]
    host: str
    port: int = 0
    held: dict[str, tuple[asyncio.Event, asyncio.Event]] = attrs.field(factory=dict)
    requests: list[str] = attrs.field(factory=list)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """``http://<bridge host>:<port>``."""
        return f"http://{self.host}:{self.port}"

    def hold(self, path: str) -> tuple[asyncio.Event, asyncio.Event]:
        """``(arrived, release)``: ``arrived`` is set when ``path`` is asked for, which then
        waits for ``release``."""
        self.held[path] = (asyncio.Event(), asyncio.Event())
        return self.held[path]

    async def _get(self, request: web.Request) -> web.StreamResponse:
        # apt asks for "apt/./Packages" (a flat repository's "./"), pip for "simple/NAME/".
        path = posixpath.normpath(request.path).lstrip("/")
        if request.path.endswith("/"):
            path += "/index.html"
        self.requests.append(path)
        if path in self.held:
            arrived, release = self.held[path]
            arrived.set()
            await release.wait()
        data = self.files.get(path)
        if data is None:
            return web.Response(status=404)
        kind = "text/html" if path.endswith(".html") else "application/octet-stream"
        return web.Response(body=data, content_type=kind)

    @classmethod
    def of(cls, host: str, *, apt: Iterable[str] = (), pip: Iterable[str] = ()) -> PackageServer:
        """A server (not started) of the apt repository of ``apt`` and pip index of ``pip``."""
        files = {f"apt/{path}": data for path, data in apt_repository(apt).items()}
        files.update({f"pip/{path}": data for path, data in pip_repository(pip).items()})
        return cls(files, host)

    async def start(self) -> None:
        """Listen on the bridge's host address, an ephemeral port."""
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Release every hold and stop serving."""
        for _, release in self.held.values():
            release.set()
        if self._runner is not None:
            await self._runner.cleanup()
