"""The world outside the fake: named HTTP hosts and a package mirror on 127.0.0.1.

One aiohttp server answers for every name by its ``Host`` header: a *page*
host answers its token at any path, a *mirror* host serves a flat apt
repository (``/Packages``, ``/pool/NAME``) of small packages, each a script
that prints its own name. Sandboxes reach these names only through the
fake's egress gateway (its ``upstream`` map sends them here), so whether a
command gets through is decided by the sandbox's egress policy.
"""

from __future__ import annotations

import attrs
from aiohttp import web

__all__ = ["UpstreamHosts", "package_script"]


def package_script(name: str) -> bytes:
    """The one file of a mirror package: a program that prints its name."""
    return f"#!/bin/sh\nprintf '%s\\n' {name}\n".encode()


@attrs.define(eq=False)
class UpstreamHosts:
    """``await hosts.start()``; then ``hosts.url(name)`` for every page or mirror name."""

    pages: dict[str, str] = attrs.field(factory=dict)
    """Host name -> the token it answers."""
    mirrors: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    """Host name -> the packages its repository has."""
    _runner: web.AppRunner | None = attrs.field(init=False, default=None)
    port: int = attrs.field(init=False, default=0)

    def names(self) -> tuple[str, ...]:
        """Every name served here."""
        return (*self.pages, *self.mirrors)

    def url(self, name: str) -> str:
        """``http://<name>:<port>``."""
        return f"http://{name}:{self.port}"

    async def start(self) -> None:
        """Listen on 127.0.0.1 (an ephemeral port)."""
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> UpstreamHosts:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    async def _get(self, request: web.Request) -> web.Response:
        name = request.host.rsplit(":", 1)[0].lower()
        if name in self.pages:
            return web.Response(text=self.pages[name])
        packages = self.mirrors.get(name)
        if packages is None:
            return web.Response(status=404, text=f"no host {name} here")
        path = request.path.strip("/")
        if path == "Packages":
            index = "".join(f"Package: {p}\nFilename: pool/{p}\n\n" for p in packages)
            return web.Response(text=index)
        package = path.removeprefix("pool/")
        if path.startswith("pool/") and package in packages:
            return web.Response(body=package_script(package))
        return web.Response(status=404, text=f"{name} has no {request.path}")
