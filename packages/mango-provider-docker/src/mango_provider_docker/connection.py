"""The connection to one Docker Engine: a lazy aiodocker client, its API version, raw calls.

:class:`EngineConnection` creates its aiodocker client lazily (aiohttp needs
a running event loop, and a registration's factory is synchronous) and never
shells out to the docker CLI. Unless ``DOCKER_API_VERSION`` pins one, it uses
the daemon's own API version, learnt from the ``Api-Version`` header of the
first answer (or of ``GET /_ping`` before aiodocker's first call) -- one
round trip less than aiodocker's ``auto``, which asks the slow ``GET /version``.

Its raw calls (:meth:`EngineConnection.call`) take an ``expected=`` set of
statuses, as the kit's :meth:`~mango.provider.http.ApiClient.request` does: a
status in it is an answer the caller reads (a 404 for "no such container", a
409 for "name taken"), any other error status is a
:class:`aiodocker.DockerError` that :func:`~mango_provider_docker.errors.engine_errors`
turns into the mango error tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any

import aiodocker
import aiohttp

from mango.provider import ConfigurationError, ProviderUnavailable
from mango_provider_docker.errors import (
    API_VERSION_ENV,
    DAEMON_HINT,
    engine_errors,
    translate_docker_error,
)

__all__ = [
    "API_TIMEOUT_SECONDS",
    "CONNECT_TIMEOUT_SECONDS",
    "Answer",
    "EngineConnection",
    "docker_message",
    "json_object",
]

log = logging.getLogger(__name__)

API_TIMEOUT_SECONDS = 60.0
"""Upper bound on one control-plane call (inspect, create, start, exec create, ...)."""
CONNECT_TIMEOUT_SECONDS = 10.0
"""Upper bound on reaching the daemon and negotiating the API version."""
_ERROR_BODY_BYTES = 64 * 1024
_API_VERSION = re.compile(r"v?\d{1,3}\.\d{1,3}\Z")

Answer = tuple[int, Mapping[str, str], bytes]
"""A whole answer: status, headers, body."""


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """The JSON object of an answer; :class:`ProviderUnavailable` if it is not one."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the Docker Engine sent a malformed {what}")
    return document


def docker_message(body: bytes) -> str:
    """The ``message`` of an error answer (short JSON documents; never a file's content)."""
    message = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
        message = str(json.loads(message)["message"])
    return message


def _where(docker: aiodocker.Docker) -> str:
    # aiodocker rewrites docker_host to a dummy URL for sockets; the address it
    # resolved (socket path, tcp URL) is what a reader of the message needs.
    return str(getattr(docker, "_connection_info", docker.docker_host))


def _api_version(value: str | None) -> str:
    if not value or not value.strip():
        return "auto"
    text = value.strip()
    if not _API_VERSION.match(text):
        raise ConfigurationError(
            f"Docker Engine API version {text[:40]!r} is not a version such as 1.41",
            hint=f"set {API_VERSION_ENV} to a version such as 1.41, or unset it to use the "
            "daemon's own",
        )
    return text if text.startswith("v") else "v" + text


class EngineConnection:
    """A lazily connected aiodocker client and the raw calls aiodocker has no method for.

    ``host`` is a Docker host URL (``unix:///var/run/docker.sock``,
    ``tcp://...``); ``None`` lets aiodocker find the daemon (Docker context,
    ``DOCKER_HOST``, the usual sockets). ``api_version`` pins the API version
    (``1.41``); ``None`` uses the daemon's.
    """

    def __init__(self, host: str | None = None, api_version: str | None = None) -> None:
        self._host = host
        self._api_version = _api_version(api_version)
        self._docker: aiodocker.Docker | None = None
        self._closed = False

    @property
    def host(self) -> str:
        """Where the daemon is, for messages."""
        if self._docker is not None:
            return _where(self._docker)
        return self._host or "the default Docker host"

    def errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """:func:`engine_errors` for this engine's host."""
        return engine_errors(what, self.host)

    async def client(self) -> aiodocker.Docker:
        """The client with a negotiated API version, for aiodocker's own calls."""
        docker = self._connection()
        if docker.api_version == "auto":
            await self._negotiate(docker)
        return docker

    def _connection(self) -> aiodocker.Docker:
        """The client, created on first use; its API version may still be unknown."""
        if self._docker is None:
            if self._closed:
                raise ProviderUnavailable("the Docker provider was closed")
            self._docker = self._connect()
        return self._docker

    def _connect(self) -> aiodocker.Docker:
        # No request here: the version is learnt from the first answer (see
        # request) or from GET /_ping before aiodocker's own first call.
        # aiodocker's "auto" would ask GET /version, which the daemon answers slowly.
        try:
            return aiodocker.Docker(
                url=self._host,
                api_version=self._api_version,
                timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_SECONDS),
            )
        except aiodocker.DockerError as exc:
            raise translate_docker_error(exc, "connect", self._host or "default") from exc
        except AssertionError as exc:
            # aiodocker asserts when neither DOCKER_HOST nor a known socket exists.
            raise ProviderUnavailable(
                "no Docker Engine found: DOCKER_HOST is unset and no docker.sock exists",
                hint=DAEMON_HINT,
            ) from exc
        except ValueError as exc:
            raise ConfigurationError(
                f"cannot use Docker host {self._host or '(auto-detected)'}: {exc}",
                hint="set DOCKER_HOST to unix:///path/to/docker.sock or tcp://host:port",
            ) from exc

    @staticmethod
    def _learn_version(docker: aiodocker.Docker, headers: Mapping[str, str]) -> None:
        version = headers.get("Api-Version", "")
        if not version or not version.replace(".", "").isdigit():
            raise ProviderUnavailable(
                f"the Docker Engine reported no usable API version: {version!r}"
            )
        docker.api_version = "v" + version

    async def _negotiate(self, docker: aiodocker.Docker) -> None:
        """Adopt the daemon's API version from ``GET /_ping`` (its ``Api-Version`` header)."""
        with engine_errors("connect", _where(docker)):
            async with (
                asyncio.timeout(CONNECT_TIMEOUT_SECONDS),
                docker.session.get(f"{docker.docker_host}/_ping") as response,
            ):
                await response.read()
                if response.status >= 400:
                    raise aiodocker.DockerError(response.status, "ping failed")
                self._learn_version(docker, response.headers)
        log.debug("Docker Engine at %s speaks API %s", self.host, docker.api_version)

    async def aclose(self) -> None:
        """Close the HTTP session; idempotent."""
        self._closed = True
        docker, self._docker = self._docker, None
        if docker is not None:
            await docker.close()

    async def health(self) -> str:
        """``GET /_ping`` and ``GET /version``: a real round trip; return a one-line summary.

        Raises :class:`ProviderUnavailable` if the daemon cannot be reached or
        answers badly, :class:`ConfigurationError` if it refuses access.
        """
        with self.errors("ping the Docker Engine"):
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                _, _, pong = await self._raw("GET", "_ping")
                _, _, body = await self._raw("GET", "version")
        if pong.strip() != b"OK":
            raise ProviderUnavailable(f"the Docker Engine at {self.host} answered the ping badly")
        version = json_object(body, "version")
        return (
            f"Docker Engine {version.get('Version', '?')} at {self.host}, "
            f"API {version.get('ApiVersion', '?')}"
        )

    # ------------------------------------------------------------------ raw HTTP

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | AsyncIterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        expected: Iterable[int] = (),
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request; an error status not in ``expected`` raises :class:`aiodocker.DockerError`.

        Yields the response with its body unread (the caller reads or streams
        it). Until the API version is known the request goes unversioned (the
        daemon then speaks its own version, as a negotiation would pick) and
        the version is learnt from the answer's ``Api-Version`` header, so a
        restarted worker's first call costs no extra round trip.
        """
        docker = self._connection()
        version = docker.api_version
        prefix = "" if version == "auto" else f"/{version}"
        url = f"{docker.docker_host}{prefix}/{path}"
        # A BytesIO body: aiohttp warns that large raw bytes could stall the loop.
        # An async iterable goes as it is: sent chunk by chunk, as it yields.
        body_stream = io.BytesIO(data) if isinstance(data, bytes) else data
        async with docker.session.request(
            method, url, params=params, data=body_stream, headers=headers
        ) as response:
            if version == "auto" and docker.api_version == "auto":
                self._learn_version(docker, response.headers)
            if response.status >= 400 and response.status not in frozenset(expected):
                body = await response.content.read(_ERROR_BODY_BYTES)
                raise aiodocker.DockerError(response.status, docker_message(body))
            yield response

    async def _raw(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        expected: Iterable[int] = (),
    ) -> Answer:
        """:meth:`request` with the whole body read: for control-plane answers only."""
        async with self.request(
            method, path, params=params, data=data, headers=headers, expected=expected
        ) as response:
            return response.status, response.headers, await response.read()

    async def call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        expected: Iterable[int] = (),
    ) -> Answer:
        """One control-plane call named ``what``: bounded by :data:`API_TIMEOUT_SECONDS`, its
        errors translated (:func:`engine_errors`), the ``expected`` statuses answered."""
        with self.errors(what):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                return await self._raw(
                    method, path, params=params, data=data, headers=headers, expected=expected
                )
