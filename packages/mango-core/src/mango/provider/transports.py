"""httpx transports for remote provider adapters (re-exported by :mod:`mango.provider.http`).

:class:`PinnedTransport` dials every connection to one fixed address while
the request keeps its URL's host: the ``curl --resolve`` of httpx, for a
vendor whose sandboxes are virtual hosts behind a proxy node.

This module imports httpx (the ``remote`` extra of mango-core).
"""

from __future__ import annotations

import httpx

from mango.domain.errors import InvalidInput

__all__ = ["PinnedTransport"]


class PinnedTransport(httpx.AsyncBaseTransport):
    """Dial every connection to one fixed address, keeping the URL's host as ``Host``.

    The ``curl --resolve`` of httpx: a vendor whose sandboxes are virtual
    hosts behind a proxy node (``49983-<id>.cube.app`` served by the node at
    ``10.0.0.5:80``) is reached without DNS for the virtual names. The
    request keeps its URL for everything but the socket: the ``Host`` header
    names the virtual host, and so does TLS (SNI and certificate checks) for
    an https URL. ``scheme``, if given, replaces the URL's scheme.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        scheme: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not host or isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise InvalidInput(
                f"a pinned address needs a host and a port 1-65535, got {host!r}:{port!r}"
            )
        if scheme not in (None, "http", "https"):
            raise InvalidInput(f"a pinned scheme must be http or https, got {scheme!r}")
        self.host = host
        self.port = port
        self.scheme = scheme
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` to the pinned address with its own ``Host`` (and SNI)."""
        virtual = request.url.host
        request.url = request.url.copy_with(
            scheme=self.scheme or request.url.scheme, host=self.host, port=self.port
        )
        # httpx built the Host header from the original URL; it stays. TLS takes
        # the server name from this extension instead of the (now numeric) URL host.
        request.extensions = {**request.extensions, "sni_hostname": virtual}
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the wrapped transport's connections."""
        await self._transport.aclose()
