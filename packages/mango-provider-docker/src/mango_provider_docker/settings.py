"""Settings of the Docker provider, read from its context's environment only when it is opened."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from mango.provider import (
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_SETTING,
    MAX_PROCESS_LOG_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    ConfigurationError,
    ConformanceTarget,
    ConformanceTestbed,
    InvalidInput,
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    TargetCost,
    max_output_bytes,
    max_process_log_bytes,
    max_read_bytes,
    number_setting,
    state_dir,
)
from mango.provider.hostdirs import absolute_dir_setting
from mango_provider_docker.layout import (
    API_VERSION_ENV,
    CAPABILITIES,
    DEFAULT_CPUS,
    DEFAULT_IMAGE,
    DEFAULT_MEMORY,
    DEFAULT_PIDS_LIMIT,
    PROVIDER_NAME,
    RESOURCE_DIR_ENV,
)
from mango_provider_docker.limits import (
    MAX_CPUS,
    MAX_PIDS_LIMIT,
    check_cpus,
    check_pids_limit,
    parse_memory,
)

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from mango_provider_docker.provider import DockerProvider

# The engine, container and provider modules (aiodocker, aiohttp) are imported
# only when the provider is opened: this module is what the plugin's entry
# point loads, on every mango command, whichever provider is selected.

__all__ = [
    "API_VERSION_ENV",
    "CONFORMANCE_TARGET",
    "CPUS_ENV",
    "DOCKER_HOST_ENV",
    "IMAGE_ENV",
    "MAX_OUTPUT_BYTES_ENV",
    "MEMORY_ENV",
    "PIDS_LIMIT_ENV",
    "PORTS_ENV",
    "PULL_ENV",
    "REGISTRATION",
    "RESOURCE_DIR_ENV",
    "SETTINGS",
    "STATE_DIR_ENV",
    "DockerSettings",
    "StderrProgress",
    "open_conformance_provider",
    "open_conformance_testbed",
    "open_docker_provider",
    "read_docker_settings",
]

IMAGE_ENV = "MANGO_SANDBOX_IMAGE"
DOCKER_HOST_ENV = "DOCKER_HOST"
MEMORY_ENV = "MANGO_SANDBOX_MEMORY"
CPUS_ENV = "MANGO_SANDBOX_CPUS"
PIDS_LIMIT_ENV = "MANGO_SANDBOX_PIDS_LIMIT"
PULL_ENV = "MANGO_SANDBOX_PULL"
PORTS_ENV = "MANGO_SANDBOX_PORTS"
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
        description="default memory limit per sandbox, 6m to 1p, e.g. 512m, 2g or 2Gi (0: none)",
        default=DEFAULT_MEMORY,
    ),
    SettingSpec(
        env=CPUS_ENV,
        description="default CPU limit per sandbox, 0.01 to 1024 CPUs (0: none)",
        default=str(DEFAULT_CPUS),
    ),
    SettingSpec(
        env=PIDS_LIMIT_ENV,
        description="default limit on processes per sandbox, 16 to 4194304 (0: none)",
        default=str(DEFAULT_PIDS_LIMIT),
    ),
    SettingSpec(
        env=PULL_ENV,
        description="pull a missing image (1) or refuse to start without it (0)",
        default="1",
    ),
    SettingSpec(
        env=PORTS_ENV,
        description="container ports a new bridge-network sandbox publishes on 127.0.0.1 "
        "(an ephemeral host port each) for expose_port, comma-separated, e.g. 3000,8080",
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    MAX_PROCESS_LOG_BYTES_SETTING,
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
    publish_ports: tuple[int, ...]
    max_output_bytes: int
    max_read_bytes: int
    max_process_log_bytes: int


_API_VERSION = re.compile(r"v?\d{1,3}\.\d{1,3}\Z")


def _checked(name: str, check: Callable[[], object]) -> None:
    """Run ``check``; an :class:`InvalidInput` becomes a ConfigurationError naming ``name``."""
    try:
        check()
    except InvalidInput as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


def _ports(env: Mapping[str, str]) -> tuple[int, ...]:
    text = env.get(PORTS_ENV, "").strip()
    ports: list[int] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ConfigurationError(
                f"{PORTS_ENV} must list TCP ports from 1 to 65535, got {item!r}",
                hint=f"for example {PORTS_ENV}=3000,8080",
            )
        ports.append(int(item))
    return tuple(sorted(set(ports)))


def read_docker_settings(environ: Mapping[str, str]) -> DockerSettings:
    """Read and validate the settings from ``environ`` (the provider context's).

    Raises :class:`ConfigurationError` naming the variable at fault. Empty
    values count as unset. Every number has a range: memory 6m to 1p, CPUs
    0.01 to 1024, pids 16 to 4194304 (0 means no limit for each of them).
    """
    env = environ
    resource_text = env.get(RESOURCE_DIR_ENV, "").strip()
    if resource_text:
        resource_dir = absolute_dir_setting(RESOURCE_DIR_ENV, resource_text)
    else:
        resource_dir = state_dir(env) / "docker"
    pull_text = env.get(PULL_ENV, "").strip().lower() or "1"
    if pull_text not in ("0", "1", "true", "false", "yes", "no"):
        raise ConfigurationError(f"{PULL_ENV} must be 1 or 0, got {pull_text!r}")
    api_version = env.get(API_VERSION_ENV, "").strip() or None
    if api_version is not None and not _API_VERSION.match(api_version):
        raise ConfigurationError(
            f"{API_VERSION_ENV} must be an Engine API version such as 1.41, got {api_version!r}",
            hint=f"unset {API_VERSION_ENV} to use the daemon's own version",
        )
    memory = env.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY
    _checked(MEMORY_ENV, lambda: parse_memory(memory))
    cpus = number_setting(env, CPUS_ENV, minimum=0, maximum=MAX_CPUS, unit="CPUs")
    cpus = DEFAULT_CPUS if cpus is None else cpus
    _checked(CPUS_ENV, lambda: check_cpus(cpus))
    pids = number_setting(
        env, PIDS_LIMIT_ENV, minimum=0, maximum=MAX_PIDS_LIMIT, integer=True, unit="processes"
    )
    pids_limit = DEFAULT_PIDS_LIMIT if pids is None else int(pids)
    _checked(PIDS_LIMIT_ENV, lambda: check_pids_limit(pids_limit))
    return DockerSettings(
        publish_ports=_ports(env),
        image=env.get(IMAGE_ENV, "").strip() or DEFAULT_IMAGE,
        resource_dir=resource_dir,
        host=env.get(DOCKER_HOST_ENV, "").strip() or None,
        api_version=api_version,
        memory=memory,
        cpus=cpus,
        pids_limit=pids_limit,
        pull=pull_text in ("1", "true", "yes"),
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
        max_process_log_bytes=max_process_log_bytes(env),
    )


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


def open_docker_provider(context: ProviderContext) -> DockerProvider:
    """The registration's factory: a :class:`DockerProvider` in ``context``'s namespace.

    Its settings come from ``context.environ``, never from ``os.environ``. It
    does no I/O; the Engine is contacted on first use.
    """
    from mango_provider_docker.provider import DockerProvider

    settings = read_docker_settings(context.environ)
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
        max_process_log_bytes=settings.max_process_log_bytes,
        pull_missing_images=settings.pull,
        publish_ports=settings.publish_ports,
        progress=StderrProgress(),
    )


def open_conformance_provider(scratch_dir: Path) -> AbstractAsyncContextManager[DockerProvider]:
    """The conformance target's opener (see :mod:`mango_provider_docker.conformance`)."""
    from mango_provider_docker.conformance import open_conformance_provider as open_target

    return open_target(scratch_dir)


def open_conformance_testbed(scratch_dir: Path) -> AbstractAsyncContextManager[ConformanceTestbed]:
    """The target's testbed: the package image (see :mod:`mango_provider_docker.conformance`)."""
    from mango_provider_docker.conformance import open_conformance_testbed as open_testbed

    return open_testbed(scratch_dir)


REGISTRATION = ProviderRegistration(
    name=PROVIDER_NAME,
    capabilities=CAPABILITIES,
    support_level=SupportLevel.AVAILABLE,
    settings=SETTINGS,
    factory=open_docker_provider,
    description="one container per Session on a Docker Engine (aiodocker, no CLI)",
)
"""``docker``: the core contract, ``package-setup``, File Resources and Session outputs
(provider-owned mounts)."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=open_conformance_provider,
    description="local Docker Engine, image mango-test-busybox:latest (packages: an image "
    "made from mango-test-debian:latest with apt and pip sources baked in), never pulls",
    # Each container operation costs tens of milliseconds: the profiles' container budget.
    cost=TargetCost.CONTAINER,
    testbed=open_conformance_testbed,
)
"""The offline target: the local Docker Engine with the busybox test image, and a Debian
image with offline apt and pip sources for the package-setup checks."""
