"""The one place where aiodocker and aiohttp exceptions become mango errors.

Every call to the Engine runs inside :func:`engine_errors`:

========================================  =========================================
aiodocker / aiohttp                       mango
========================================  =========================================
connection refused, socket missing,       :class:`ProviderUnavailable` (retry)
reset, timeout, HTTP 5xx, 409
HTTP 404 on a container-scoped call       :class:`SandboxNotFound`
HTTP 400; HTTP 500 that no retry cures    :class:`InvalidInput` (permanent)
(a body the daemon cannot decode, a
limit the kernel refuses at start)
HTTP 400 "client version is too new"      :class:`ConfigurationError` (hint:
                                          ``DOCKER_API_VERSION``)
HTTP 401 / 403, broken docker context     :class:`ConfigurationError` (permanent)
========================================  =========================================

Calls of :class:`~mango_provider_docker.engine.Engine` where a status is an
expected answer rather than a failure say so in their return value instead:
``inspect_container`` returns ``None`` for 404, ``create_container`` returns
``None`` for a name conflict (409), ``stat_path`` returns ``None`` for a
missing path.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import aiodocker
import aiohttp

from mango.provider import (
    ConfigurationError,
    InvalidInput,
    MangoError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango_provider_docker.layout import API_VERSION_ENV

__all__ = ["API_VERSION_ENV", "DAEMON_HINT", "engine_errors", "translate_docker_error"]

DAEMON_HINT = "is dockerd running? DOCKER_HOST selects the daemon"
_CLIENT_VERSION = re.compile(r"client version \S+ is too (new|old)", re.IGNORECASE)


def translate_docker_error(exc: aiodocker.DockerError, what: str, host: str) -> MangoError:
    """Map one aiodocker error to the mango error tree (see the module docstring)."""
    status = exc.status
    message = exc.message.strip() or f"HTTP {status}"
    if isinstance(exc, aiodocker.exceptions.DockerContextError):
        return ConfigurationError(f"{what}: Docker context: {message}")
    if status == 900:
        return ProviderUnavailable(
            f"{what}: cannot reach the Docker Engine at {host}",
            hint=DAEMON_HINT,
        )
    if status == 404:
        return SandboxNotFound(f"{what}: {message}")
    if status in (401, 403) or (status == 400 and _CLIENT_VERSION.search(message)):
        refused = "access" if status != 400 else "the API version"
        hint = f"set {API_VERSION_ENV} to a version the daemon supports, or unset it"
        return ConfigurationError(
            f"{what}: the Docker Engine refused {refused}: {message}",
            hint=hint if status == 400 else None,
        )
    if status == 400 or (status == 500 and _is_impossible_request(message)):
        return InvalidInput(f"{what}: the Docker Engine rejected the request: {message}")
    return ProviderUnavailable(f"{what}: Docker Engine error {status}: {message}")


def _is_impossible_request(message: str) -> bool:
    """A 500 that no retry can cure: a body the daemon cannot decode, or a limit the kernel
    refuses when the container starts (``pids.max``, ``cpu.cfs_quota_us``: invalid argument)."""
    if "cannot unmarshal" in message:
        return True
    return "OCI runtime create failed" in message and "invalid argument" in message


class _EngineErrors:
    """The context manager :func:`engine_errors` returns."""

    __slots__ = ("_host", "_what")

    def __init__(self, what: str, host: str) -> None:
        self._what = what
        self._host = host

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is None or isinstance(exc, MangoError):
            return
        if isinstance(exc, aiodocker.DockerError):
            raise translate_docker_error(exc, self._what, self._host) from exc
        if isinstance(exc, TimeoutError):
            raise ProviderUnavailable(
                f"{self._what}: the Docker Engine did not answer in time"
            ) from exc
        if isinstance(exc, aiohttp.ClientError | OSError):
            raise ProviderUnavailable(
                f"{self._what}: connection to the Docker Engine at {self._host} failed: {exc}",
                hint=DAEMON_HINT,
            ) from exc


def engine_errors(what: str, host: str) -> contextlib.AbstractContextManager[None]:
    """Translate aiodocker and aiohttp exceptions raised in the block; ``what`` names the call."""
    return _EngineErrors(what, host)
