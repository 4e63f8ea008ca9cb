"""The Docker Engine API as this provider uses it, over aiodocker.

:class:`Engine` is the only class that talks to the daemon. It creates its
aiodocker client lazily (aiohttp needs a running event loop, and a
registration's factory is synchronous) and never shells out to the docker
CLI. Unless ``DOCKER_API_VERSION`` pins one, it uses the daemon's own API
version, learnt from the ``Api-Version`` header of the first answer (or of
``GET /_ping`` before aiodocker's first call) -- one round trip less than
aiodocker's ``auto``, which asks the slow ``GET /version``.

Every call runs inside :func:`~mango_provider_docker.errors.engine_errors`,
the one place where aiodocker and aiohttp exceptions become mango errors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import aiodocker
import aiohttp
import attrs
from aiodocker.execs import Exec
from aiodocker.stream import Stream

from mango.provider import ConfigurationError, ProviderUnavailable, SandboxNotFound
from mango_provider_docker.errors import (
    API_VERSION_ENV,
    DAEMON_HINT,
    engine_errors,
    translate_docker_error,
)

__all__ = [
    "API_TIMEOUT_SECONDS",
    "ARCHIVE_CHUNK_BYTES",
    "CONNECT_TIMEOUT_SECONDS",
    "PULL_HINT",
    "REMOVE_WAIT_SECONDS",
    "Engine",
    "PathStat",
]

log = logging.getLogger(__name__)

API_TIMEOUT_SECONDS = 60.0
"""Upper bound on one control-plane call (inspect, create, start, exec create, ...)."""
CONNECT_TIMEOUT_SECONDS = 10.0
"""Upper bound on reaching the daemon and negotiating the API version."""
REMOVE_WAIT_SECONDS = 30.0
"""How long a remove waits for a removal already in progress elsewhere."""
ARCHIVE_CHUNK_BYTES = 256 * 1024
"""Largest chunk of an archive download handed to the caller at once."""
_ERROR_BODY_BYTES = 64 * 1024

# Go's os.FileMode type bits, as the archive stat header reports them.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_TYPE = _MODE_DIR | _MODE_SYMLINK | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
_STAT_HEADER = "X-Docker-Container-Path-Stat"


@attrs.frozen
class PathStat:
    """What ``HEAD /containers/{id}/archive`` says about one path (never follows its last link)."""

    name: str
    mode: int
    size: int

    @property
    def is_dir(self) -> bool:
        """A directory."""
        return bool(self.mode & _MODE_DIR)

    @property
    def is_symlink(self) -> bool:
        """A symbolic link."""
        return bool(self.mode & _MODE_SYMLINK)

    @property
    def is_regular(self) -> bool:
        """A regular file: no type bit set."""
        return not self.mode & _MODE_TYPE

    @classmethod
    def from_header(cls, value: str) -> PathStat:
        """Decode the base64 JSON of the ``X-Docker-Container-Path-Stat`` header."""
        try:
            document = json.loads(base64.b64decode(value))
            return cls(
                name=str(document["name"]),
                mode=int(document["mode"]),
                size=int(document.get("size", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderUnavailable(
                f"the Docker Engine sent a malformed path stat: {exc}"
            ) from exc


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the Docker Engine sent a malformed {what}")
    return document


def _where(docker: aiodocker.Docker) -> str:
    # aiodocker rewrites docker_host to a dummy URL for sockets; the address it
    # resolved (socket path, tcp URL) is what a reader of the message needs.
    return str(getattr(docker, "_connection_info", docker.docker_host))


_API_VERSION = re.compile(r"v?\d{1,3}\.\d{1,3}\Z")


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


PULL_HINT = (
    "check the Docker Engine's network and proxy settings (the daemon pulls, not mango), "
    "or put the image on the Engine another way (docker load, docker import, a local "
    "build), then set MANGO_SANDBOX_PULL=0"
)
"""What to do when a pull cannot reach the registry (offline machines, blocked networks)."""

# How dockerd (Go's net and net/http) words a registry it cannot reach.
_UNREACHABLE_REGISTRY = (
    "dial tcp",
    "no such host",
    "connection refused",
    "i/o timeout",
    "network is unreachable",
    "TLS handshake timeout",
    "Client.Timeout exceeded",
    "request canceled while waiting for connection",
)


class _ArchiveChunks:
    """The chunks of an archive download, with transport errors mapped to mango errors."""

    def __init__(self, chunks: AsyncIterator[bytes], what: str, engine: Engine) -> None:
        self._chunks = chunks
        self._what = what
        self._engine = engine

    def __aiter__(self) -> _ArchiveChunks:
        return self

    async def __anext__(self) -> bytes:
        with self._engine.errors(self._what):
            return await self._chunks.__anext__()


class Engine:
    """A lazily connected aiodocker client with the calls the provider needs.

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
        # No request here: the version is learnt from the first answer (see _raw)
        # or from GET /_ping before aiodocker's own first call. aiodocker's
        # "auto" would ask GET /version, which the daemon answers slowly.
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
        version = _json_object(body, "version")
        return (
            f"Docker Engine {version.get('Version', '?')} at {self.host}, "
            f"API {version.get('ApiVersion', '?')}"
        )

    # ------------------------------------------------------------------ raw HTTP

    @contextlib.asynccontextmanager
    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request that aiodocker has no method for; non-2xx raises :class:`DockerError`.

        Yields the response with its body unread (the caller reads or streams it).
        Until the API version is known the request goes unversioned (the
        daemon then speaks its own version, as a negotiation would pick) and
        the version is learnt from the answer's ``Api-Version`` header, so a
        restarted worker's first call costs no extra round trip.
        """
        docker = self._connection()
        version = docker.api_version
        prefix = "" if version == "auto" else f"/{version}"
        url = f"{docker.docker_host}{prefix}/{path}"
        # A BytesIO body: aiohttp warns that large raw bytes could stall the loop.
        body_stream = io.BytesIO(data) if data is not None else None
        async with docker.session.request(
            method, url, params=params, data=body_stream, headers=headers
        ) as response:
            if version == "auto" and docker.api_version == "auto":
                self._learn_version(docker, response.headers)
            if response.status >= 400:
                # Error bodies are short JSON documents; never a file's content.
                message = (await response.content.read(_ERROR_BODY_BYTES)).decode(
                    "utf-8", "replace"
                )
                with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
                    message = str(json.loads(message)["message"])
                raise aiodocker.DockerError(response.status, message)
            yield response

    async def _raw(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """:meth:`_request` with the whole body read: for control-plane answers only."""
        async with self._request(
            method, path, params=params, data=data, headers=headers
        ) as response:
            return response.status, response.headers, await response.read()

    # ------------------------------------------------------------------ containers

    async def inspect_container(self, target: str) -> dict[str, Any] | None:
        """``GET /containers/{target}/json``; ``None`` if there is no such container."""
        with self.errors(f"inspect container {target}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    _, _, body = await self._raw("GET", f"containers/{target}/json")
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return None
                raise
        return _json_object(body, "container inspect")

    async def create_container(self, name: str, config: Mapping[str, Any]) -> str | None:
        """``POST /containers/create?name=...``; the new id, or ``None`` if the name is taken."""
        docker = await self.client()
        with self.errors(f"create container {name}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    container = await docker.containers.create(dict(config), name=name)
            except aiodocker.DockerError as exc:
                if exc.status == 409:
                    return None
                if exc.status == 404:
                    # The only thing create can miss is the image.
                    raise ConfigurationError(
                        f"cannot create container {name}: {exc.message}"
                    ) from exc
                raise
        return container.id

    async def start_container(self, container_id: str) -> None:
        """``POST /containers/{id}/start`` (already running is fine)."""
        docker = await self.client()
        with self.errors(f"start container {container_id}"):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                await docker.containers.container(container_id).start()

    async def unpause_container(self, container_id: str) -> None:
        """``POST /containers/{id}/unpause``."""
        with self.errors(f"unpause container {container_id}"):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                await self._raw("POST", f"containers/{container_id}/unpause")

    async def kill_container(self, container_id: str) -> bool:
        """``POST /containers/{id}/kill`` (SIGKILL): stop every process now; False if gone.

        A container that is not running is fine (the daemon answers 409).
        """
        with self.errors(f"kill container {container_id}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    await self._raw("POST", f"containers/{container_id}/kill")
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
        return True

    async def remove_container(self, container_id: str) -> bool:
        """Force-remove a container and its anonymous volumes; False if it was already gone.

        A removal already in progress (409) is waited for, bounded by
        :data:`REMOVE_WAIT_SECONDS`.
        """
        docker = await self.client()
        container = docker.containers.container(container_id)
        with self.errors(f"remove container {container_id}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    await container.delete(force=True, v=True)
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
            else:
                return True
        deadline = time.monotonic() + REMOVE_WAIT_SECONDS
        delay = 0.05
        while await self.inspect_container(container_id) is not None:
            if time.monotonic() >= deadline:
                raise ProviderUnavailable(
                    f"container {container_id} is still being removed "
                    f"after {REMOVE_WAIT_SECONDS:g}s"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        return True

    async def list_containers(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every container (running or not) carrying all ``labels``."""
        filters = json.dumps({"label": [f"{key}={value}" for key, value in labels.items()]})
        with self.errors("list containers"):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                _, _, body = await self._raw(
                    "GET", "containers/json", params={"all": "1", "filters": filters}
                )
        try:
            listing = json.loads(body)
        except ValueError:
            listing = None
        if not isinstance(listing, list):
            raise ProviderUnavailable("the Docker Engine sent a malformed container list")
        return [item for item in listing if isinstance(item, dict)]

    # ------------------------------------------------------------------ images

    async def image_exists(self, image: str) -> bool:
        """``GET /images/{image}/json`` answers 200."""
        docker = await self.client()
        with self.errors(f"inspect image {image}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    await docker.images.inspect(image)
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return False
                raise
        return True

    async def pull_image(self, image: str, progress: Callable[[str], None]) -> None:
        """Pull ``image``, reporting each status line of the progress stream to ``progress``."""
        docker = await self.client()
        try:
            with self.errors(f"pull image {image}"):
                stream: AsyncIterator[dict[str, Any]] = docker.images.pull(image, stream=True)
                async for event in stream:
                    status = str(event.get("status", "")).strip()
                    if status:
                        detail = str(event.get("progress", "")).strip()
                        ident = str(event.get("id", "")).strip()
                        progress(" ".join(part for part in (ident, status, detail) if part))
        except SandboxNotFound as exc:
            # A 404 here is about the image, not a sandbox.
            raise ConfigurationError(f"image {image!r} was not found: {exc}") from exc
        except ProviderUnavailable as exc:
            if any(marker in str(exc) for marker in _UNREACHABLE_REGISTRY):
                raise ProviderUnavailable(
                    f"cannot pull image {image!r}: the Docker Engine could not reach the "
                    f"image's registry ({exc})",
                    hint=PULL_HINT,
                ) from exc
            raise

    # ------------------------------------------------------------------ exec

    async def exec_create(
        self,
        container_id: str,
        argv: Sequence[str],
        *,
        env: Sequence[str],
        stdin: bool,
        workdir: str,
    ) -> Exec | None:
        """``POST /containers/{id}/exec`` with no TTY; ``None`` if the container is not running."""
        docker = await self.client()
        body = {
            "AttachStdin": stdin,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": list(argv),
            "Env": list(env),
            "WorkingDir": workdir,
        }
        with self.errors(f"exec in container {container_id}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    # Through _raw: a large environment is sent from a stream, not as one
                    # bytes body (which aiohttp warns could stall the event loop).
                    _, _, answer = await self._raw(
                        "POST",
                        f"containers/{container_id}/exec",
                        data=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"},
                    )
            except aiodocker.DockerError as exc:
                if exc.status == 409:
                    return None
                raise
        exec_id = _json_object(answer, "exec create answer").get("Id")
        if not isinstance(exec_id, str) or not exec_id:
            raise ProviderUnavailable("the Docker Engine answered an exec create without an id")
        return Exec(docker, exec_id, tty=False)

    def exec_stream(self, execution: Exec) -> Stream:
        """The attach stream of a created exec; entering it starts the command."""
        return execution.start(detach=False)

    async def exec_start_detached(self, execution: Exec) -> None:
        """Start an exec without attaching to it."""
        with self.errors(f"start exec {execution.id}"):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                await execution.start(detach=True)

    async def exec_inspect(self, execution: Exec) -> dict[str, Any] | None:
        """``GET /exec/{id}/json``; ``None`` if the exec (with its container) is gone."""
        with self.errors(f"inspect exec {execution.id}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    return await execution.inspect()
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return None
                raise

    # ------------------------------------------------------------------ archive

    async def stat_path(self, container_id: str, path: str) -> PathStat | None:
        """``HEAD /containers/{id}/archive?path=...``: the path's own stat; ``None`` on 404.

        The last component is never followed. A HEAD answer has no body, so a
        404 for a missing path and one for a missing container look alike;
        callers tell them apart by stat-ing a path that must exist.
        """
        with self.errors(f"stat {path} in container {container_id}"):
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    _, headers, _ = await self._raw(
                        "HEAD", f"containers/{container_id}/archive", params={"path": path}
                    )
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return None
                raise
        header = headers.get(_STAT_HEADER)
        if header is None:
            raise ProviderUnavailable(f"the Docker Engine sent no {_STAT_HEADER} header")
        return PathStat.from_header(header)

    @contextlib.asynccontextmanager
    async def open_archive(
        self, container_id: str, path: str
    ) -> AsyncIterator[AsyncIterator[bytes] | None]:
        """``GET /containers/{id}/archive?path=...``: the tar of ``path`` as a stream of chunks.

        Yields ``None`` if the path is missing. The body is never held whole:
        chunks of at most :data:`ARCHIVE_CHUNK_BYTES` arrive as the caller
        reads them (aiohttp pauses the socket while the caller does not), and
        leaving the block closes the transfer. Raises :class:`SandboxNotFound`
        if the container is gone.
        """
        what = f"read {path} from container {container_id}"
        async with contextlib.AsyncExitStack() as stack:
            with self.errors(what):
                try:
                    async with asyncio.timeout(API_TIMEOUT_SECONDS):
                        response = await stack.enter_async_context(
                            self._request(
                                "GET", f"containers/{container_id}/archive", params={"path": path}
                            )
                        )
                except aiodocker.DockerError as exc:
                    if exc.status == 404 and "no such container" not in exc.message.lower():
                        response = None
                    else:
                        raise
            if response is None:
                yield None
            else:
                yield _ArchiveChunks(response.content.iter_chunked(ARCHIVE_CHUNK_BYTES), what, self)

    async def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None:
        """``PUT /containers/{id}/archive?path=...``: extract a tar below the directory ``path``.

        ``noOverwriteDirNonDir`` makes the daemon refuse to replace a
        directory by a file or the other way round.
        """
        with self.errors(f"write below {path} in container {container_id}"):
            await self._raw(
                "PUT",
                f"containers/{container_id}/archive",
                params={"path": path, "noOverwriteDirNonDir": "1"},
                data=tar_bytes,
                headers={"Content-Type": "application/x-tar"},
            )
