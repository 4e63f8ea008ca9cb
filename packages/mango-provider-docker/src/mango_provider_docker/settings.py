"""Settings of the Docker provider, read from the environment only when it is opened."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import attrs

from mango.provider import (
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    CapabilitySet,
    ConfigurationError,
    ConformanceTarget,
    InvalidInput,
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    max_output_bytes,
    max_read_bytes,
    state_dir,
)
from mango.provider.hostdirs import absolute_dir_setting
from mango_provider_docker.conformance import open_conformance_provider
from mango_provider_docker.container import default_limits
from mango_provider_docker.layout import PROVIDER_NAME, RESOURCE_DIR_ENV
from mango_provider_docker.provider import (
    DEFAULT_CPUS,
    DEFAULT_IMAGE,
    DEFAULT_MEMORY,
    DEFAULT_PIDS_LIMIT,
    DockerProvider,
)

__all__ = [
    "API_VERSION_ENV",
    "CONFORMANCE_TARGET",
    "CPUS_ENV",
    "DOCKER_HOST_ENV",
    "IMAGE_ENV",
    "MAX_OUTPUT_BYTES_ENV",
    "MEMORY_ENV",
    "PIDS_LIMIT_ENV",
    "PULL_ENV",
    "REGISTRATION",
    "RESOURCE_DIR_ENV",
    "SETTINGS",
    "STATE_DIR_ENV",
    "DockerSettings",
    "StderrProgress",
    "open_docker_provider",
    "read_docker_settings",
]

IMAGE_ENV = "MANGO_SANDBOX_IMAGE"
DOCKER_HOST_ENV = "DOCKER_HOST"
API_VERSION_ENV = "DOCKER_API_VERSION"
MEMORY_ENV = "MANGO_SANDBOX_MEMORY"
CPUS_ENV = "MANGO_SANDBOX_CPUS"
PIDS_LIMIT_ENV = "MANGO_SANDBOX_PIDS_LIMIT"
PULL_ENV = "MANGO_SANDBOX_PULL"
STATE_DIR_ENV = "MANGO_STATE_DIR"

SETTINGS = (
    SettingSpec(
        env=IMAGE_ENV,
        description="image of sandboxes whose spec names none (pulled if missing)",
        default=DEFAULT_IMAGE,
    ),
    SettingSpec(
        env=RESOURCE_DIR_ENV,
        description=(
            "absolute host directory owning one sub-directory per sandbox "
            f"(default: docker/ in mango's state directory, ${STATE_DIR_ENV})"
        ),
    ),
    SettingSpec(
        env=DOCKER_HOST_ENV,
        description="Docker Engine address, e.g. unix:///var/run/docker.sock or tcp://host:2376 "
        "(default: the Docker context or the usual socket)",
    ),
    SettingSpec(
        env=API_VERSION_ENV,
        description="pin the Engine API version, e.g. 1.41 (default: negotiated with the daemon)",
    ),
    SettingSpec(
        env=MEMORY_ENV,
        description="default memory limit per sandbox, e.g. 512m or 2g (0: none)",
        default=DEFAULT_MEMORY,
    ),
    SettingSpec(
        env=CPUS_ENV,
        description="default CPU limit per sandbox, in CPUs (0: none)",
        default=str(DEFAULT_CPUS),
    ),
    SettingSpec(
        env=PIDS_LIMIT_ENV,
        description="default limit on processes per sandbox (0: none)",
        default=str(DEFAULT_PIDS_LIMIT),
    ),
    SettingSpec(
        env=PULL_ENV,
        description="pull a missing image (1) or refuse to start without it (0)",
        default="1",
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
)
"""The settings the Docker provider reads, as its registration declares them."""


@attrs.frozen
class DockerSettings:
    """The Docker provider's settings, validated."""

    image: str
    resource_dir: Path
    host: str | None
    api_version: str | None
    memory: str
    cpus: float
    pids_limit: int
    pull: bool
    max_output_bytes: int
    max_read_bytes: int


def _number(env: Mapping[str, str], name: str, default: str, *, integer: bool) -> float:
    text = env.get(name, "").strip() or default
    try:
        value = int(text, 10) if integer else float(text)
    except ValueError:
        value = -1
    if value < 0 or not math.isfinite(value):
        kind = "a whole number" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind} >= 0, got {text!r}")
    return value


def read_docker_settings(environ: Mapping[str, str] | None = None) -> DockerSettings:
    """Read and validate the settings from ``environ`` (default: ``os.environ``).

    Raises :class:`ConfigurationError` naming the variable at fault. Empty
    values count as unset.
    """
    env = os.environ if environ is None else environ
    resource_text = env.get(RESOURCE_DIR_ENV, "").strip()
    if resource_text:
        resource_dir = absolute_dir_setting(RESOURCE_DIR_ENV, resource_text)
    else:
        resource_dir = state_dir(env) / "docker"
    pull_text = env.get(PULL_ENV, "").strip().lower() or "1"
    if pull_text not in ("0", "1", "true", "false", "yes", "no"):
        raise ConfigurationError(f"{PULL_ENV} must be 1 or 0, got {pull_text!r}")
    settings = DockerSettings(
        image=env.get(IMAGE_ENV, "").strip() or DEFAULT_IMAGE,
        resource_dir=resource_dir,
        host=env.get(DOCKER_HOST_ENV, "").strip() or None,
        api_version=env.get(API_VERSION_ENV, "").strip() or None,
        memory=env.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY,
        cpus=_number(env, CPUS_ENV, str(DEFAULT_CPUS), integer=False),
        pids_limit=int(_number(env, PIDS_LIMIT_ENV, str(DEFAULT_PIDS_LIMIT), integer=True)),
        pull=pull_text in ("1", "true", "yes"),
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
    )
    try:
        default_limits(settings.memory, settings.cpus, settings.pids_limit)
    except InvalidInput as exc:
        raise ConfigurationError(f"{MEMORY_ENV}/{CPUS_ENV}/{PIDS_LIMIT_ENV}: {exc}") from None
    return settings


@attrs.define
class StderrProgress:
    """Prints image pull progress on the command line: status changes, and at most one
    progress line per ``interval`` seconds."""

    stream: TextIO | None = None
    interval: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _last: float = attrs.field(default=float("-inf"), init=False)

    def __call__(self, line: str) -> None:
        """Report one line of progress."""
        now = self.clock()
        if any(word in line for word in ("Downloading", "Extracting", "Waiting")):
            if now - self._last < self.interval:
                return
            self._last = now
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"mango: docker: {line}", file=stream, flush=True)


def open_docker_provider(
    context: ProviderContext, environ: Mapping[str, str] | None = None
) -> DockerProvider:
    """The registration's factory: a :class:`DockerProvider` in ``context``'s namespace.

    It does no I/O; the Engine is contacted on first use.
    """
    settings = read_docker_settings(environ)
    return DockerProvider(
        settings.resource_dir,
        namespace=context.namespace,
        image=settings.image,
        host=settings.host,
        api_version=settings.api_version,
        memory=settings.memory,
        cpus=settings.cpus,
        pids_limit=settings.pids_limit,
        max_output_bytes=settings.max_output_bytes,
        max_read_bytes=settings.max_read_bytes,
        pull_missing_images=settings.pull,
        progress=StderrProgress(),
    )


REGISTRATION = ProviderRegistration(
    name=PROVIDER_NAME,
    capabilities=CapabilitySet(),
    support_level=SupportLevel.AVAILABLE,
    settings=SETTINGS,
    factory=open_docker_provider,
    description="one container per Session on a Docker Engine (aiodocker, no CLI)",
)
"""``docker``: core contract only (no optional capabilities yet)."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=open_conformance_provider,
    description="local Docker Engine, image mango-test-busybox:latest, never pulls",
)
"""The offline target: the local Docker Engine with the busybox test image."""
