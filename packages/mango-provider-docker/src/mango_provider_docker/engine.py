"""The Docker Engine API as this provider uses it, over aiodocker.

:class:`Engine` is the only class that talks to the daemon: containers,
images, exec and the archive API, on the connection of
:class:`~mango_provider_docker.connection.EngineConnection` (the lazy
client, the API version, the raw calls). A status that is an expected answer
rather than a failure is passed in ``expected=`` (as the kit's
``ApiClient.request`` takes it) and read from the answer: a 404 from an
inspect is ``None``, a 409 from a create is "the name is taken".

Every call runs inside :func:`~mango_provider_docker.errors.engine_errors`,
the one place where aiodocker and aiohttp exceptions become mango errors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import attrs
from aiodocker.execs import Exec
from aiodocker.stream import Stream

from mango.provider import ConfigurationError, ProviderUnavailable, SandboxNotFound
from mango_provider_docker.connection import (
    API_TIMEOUT_SECONDS,
    CONNECT_TIMEOUT_SECONDS,
    EngineConnection,
    docker_message,
    json_object,
)
from mango_provider_docker.errors import engine_errors, translate_docker_error

__all__ = [
    "API_TIMEOUT_SECONDS",
    "ARCHIVE_CHUNK_BYTES",
    "CONNECT_TIMEOUT_SECONDS",
    "PULL_HINT",
    "REMOVE_WAIT_SECONDS",
    "Engine",
    "PathStat",
    "engine_errors",
    "translate_docker_error",
]

REMOVE_WAIT_SECONDS = 30.0
"""How long a remove waits for a removal already in progress elsewhere."""
ARCHIVE_CHUNK_BYTES = 256 * 1024
"""Largest chunk of an archive download handed to the caller at once."""
_JSON = {"Content-Type": "application/json"}

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


class Engine(EngineConnection):
    """The calls the provider makes of one Docker Engine (see the module docstring)."""

    # ------------------------------------------------------------------ containers

    async def inspect_container(self, target: str) -> dict[str, Any] | None:
        """``GET /containers/{target}/json``; ``None`` if there is no such container."""
        status, _, body = await self.call(
            f"inspect container {target}", "GET", f"containers/{target}/json", expected={404}
        )
        return None if status == 404 else json_object(body, "container inspect")

    async def create_container(self, name: str, config: Mapping[str, Any]) -> str | None:
        """``POST /containers/create?name=...``; the new id, or ``None`` if the name is taken."""
        status, _, body = await self.call(
            f"create container {name}",
            "POST",
            "containers/create",
            params={"name": name},
            data=json.dumps(dict(config), sort_keys=True).encode(),
            headers=_JSON,
            expected={404, 409},
        )
        if status == 409:
            return None
        if status == 404:
            # The only thing create can miss is the image.
            raise ConfigurationError(f"cannot create container {name}: {docker_message(body)}")
        container_id = json_object(body, "container create answer").get("Id")
        if not isinstance(container_id, str) or not container_id:
            raise ProviderUnavailable("the Docker Engine answered a container create without an id")
        return container_id

    async def start_container(self, container_id: str) -> None:
        """``POST /containers/{id}/start`` (already running is fine)."""
        docker = await self.client()
        with self.errors(f"start container {container_id}"):
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                await docker.containers.container(container_id).start()

    async def pause_container(self, container_id: str) -> None:
        """``POST /containers/{id}/pause`` (the cgroup freezer: every process stops)."""
        what = f"pause container {container_id}"
        await self.call(what, "POST", f"containers/{container_id}/pause")

    async def unpause_container(self, container_id: str) -> None:
        """``POST /containers/{id}/unpause``."""
        what = f"unpause container {container_id}"
        await self.call(what, "POST", f"containers/{container_id}/unpause")

    async def kill_container(self, container_id: str) -> bool:
        """``POST /containers/{id}/kill`` (SIGKILL): stop every process now; False if gone.

        A container that is not running is fine (the daemon answers 409).
        """
        status, _, _ = await self.call(
            f"kill container {container_id}",
            "POST",
            f"containers/{container_id}/kill",
            expected={404, 409},
        )
        return status != 404

    async def remove_container(self, container_id: str) -> bool:
        """Force-remove a container and its anonymous volumes; False if it was already gone.

        A removal already in progress (409) is waited for, bounded by
        :data:`REMOVE_WAIT_SECONDS`.
        """
        status, _, _ = await self.call(
            f"remove container {container_id}",
            "DELETE",
            f"containers/{container_id}",
            params={"force": "1", "v": "1"},
            expected={404, 409},
        )
        if status != 409:
            return status != 404
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
        _, _, body = await self.call(
            "list containers", "GET", "containers/json", params={"all": "1", "filters": filters}
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
        status, _, _ = await self.call(
            f"inspect image {image}", "GET", f"images/{image}/json", expected={404}
        )
        return status != 404

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
        # Raw: a large environment is sent from a stream, not as one bytes body
        # (which aiohttp warns could stall the event loop).
        status, _, answer = await self.call(
            f"exec in container {container_id}",
            "POST",
            f"containers/{container_id}/exec",
            data=json.dumps(body).encode(),
            headers=_JSON,
            expected={409},
        )
        if status == 409:
            return None
        exec_id = json_object(answer, "exec create answer").get("Id")
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
        status, _, body = await self.call(
            f"inspect exec {execution.id}", "GET", f"exec/{execution.id}/json", expected={404}
        )
        return None if status == 404 else json_object(body, "exec inspect")

    # ------------------------------------------------------------------ archive

    async def stat_path(self, container_id: str, path: str) -> PathStat | None:
        """``HEAD /containers/{id}/archive?path=...``: the path's own stat; ``None`` on 404.

        The last component is never followed. A HEAD answer has no body, so a
        404 for a missing path and one for a missing container look alike;
        callers tell them apart by stat-ing a path that must exist.
        """
        status, headers, _ = await self.call(
            f"stat {path} in container {container_id}",
            "HEAD",
            f"containers/{container_id}/archive",
            params={"path": path},
            expected={404},
        )
        if status == 404:
            return None
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
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    response = await stack.enter_async_context(
                        self.request(
                            "GET",
                            f"containers/{container_id}/archive",
                            params={"path": path},
                            expected={404},
                        )
                    )
                    if response.status == 404:
                        message = docker_message(await response.read())
                        if "no such container" in message.lower():
                            raise SandboxNotFound(f"{what}: {message}")
            if response.status == 404:
                yield None
            else:
                yield _ArchiveChunks(response.content.iter_chunked(ARCHIVE_CHUNK_BYTES), what, self)

    async def put_archive_stream(
        self, container_id: str, path: str, tar_chunks: AsyncIterable[bytes]
    ) -> None:
        """:meth:`put_archive` with the tar sent as ``tar_chunks`` yields it (chunked).

        No overall timeout: a large archive takes as long as it takes; the
        daemon's answer comes once it has extracted the last byte.
        """
        with self.errors(f"write below {path} in container {container_id}"):
            async with self.request(
                "PUT",
                f"containers/{container_id}/archive",
                params={"path": path, "noOverwriteDirNonDir": "1"},
                data=tar_chunks,
                headers={"Content-Type": "application/x-tar"},
            ) as response:
                await response.read()

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
