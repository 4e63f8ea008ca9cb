"""Creating one container per Session key: the image, the name race, the start, the adoption.

``DockerProvider.create`` is create-if-absent by a deterministic container
name. These are its steps that are not the port's own:

* :func:`ensure_image` -- the image is there, or pulled (with progress) if
  pulling is allowed;
* :func:`start_new` -- a container that fails to start is removed again, so a
  retry creates it afresh;
* :func:`await_winner` -- after losing the name race (409), the winner's
  container, which the daemon may list a moment after it reserved the name;
* :func:`adopt` -- an existing container is used only if its labels name this
  key and namespace and its configuration is one mango makes for the spec.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mango.provider import (
    ConfigurationError,
    InvalidInput,
    OwnershipError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxSpec,
)
from mango.provider.ownership import Ownership
from mango_provider_docker.container import Limits, configuration_problems
from mango_provider_docker.engine import Engine
from mango_provider_docker.layout import verify_ownership
from mango_provider_docker.mounts import MountState, mount_problems

__all__ = ["CONFLICT_WAIT_SECONDS", "adopt", "await_winner", "ensure_image", "start_new"]

# The provider's logger: pull progress keeps the logger name it always had.
log = logging.getLogger("mango_provider_docker.provider")

CONFLICT_WAIT_SECONDS = 30.0
"""After losing the race for a container name, how long to wait for the winner's container."""


async def ensure_image(
    engine: Engine, image: str, *, pull: bool, progress: Callable[[str], None] | None
) -> None:
    """Make sure ``image`` is on the Engine: pull it if missing and ``pull`` allows.

    :class:`ConfigurationError` if it is missing and pulling is off, or a
    pull ended without it. ``progress`` gets the pull's lines (default: the log).
    """
    if await engine.image_exists(image):
        return
    if not pull:
        raise ConfigurationError(
            f"image {image!r} is not present on the Docker Engine and pulling is disabled",
            hint="build or pull it first, or enable pulling (MANGO_SANDBOX_PULL=1)",
        )
    report = progress or (lambda line: log.info("pulling %s: %s", image, line))
    report(f"pulling image {image}")
    await engine.pull_image(image, report)
    if not await engine.image_exists(image):
        raise ConfigurationError(f"pulling {image!r} finished but the image is not present")
    report(f"pulled image {image}")


async def start_new(engine: Engine, container_id: str) -> None:
    """Start a container just created; one that cannot start is removed, then the error raised."""
    try:
        await engine.start_container(container_id)
    except (InvalidInput, ConfigurationError, ProviderUnavailable):
        # A container that never started holds nothing; a retry creates it afresh.
        try:
            await engine.remove_container(container_id)
        except (ProviderUnavailable, SandboxNotFound) as exc:
            log.warning("could not remove container %s that failed to start: %s", container_id, exc)
        raise


async def await_winner(engine: Engine, name: str) -> dict[str, Any]:
    """The container another creator made under ``name`` (the daemon answered 409).

    The daemon reserves a name before the container can be inspected, so
    the winner may take a moment to appear.
    """
    deadline = time.monotonic() + CONFLICT_WAIT_SECONDS
    delay = 0.01
    while (inspect := await engine.inspect_container(name)) is None:
        if time.monotonic() >= deadline:
            raise ProviderUnavailable(
                f"container name {name} is taken but no such container appeared; retry"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)
    return inspect


def adopt(
    inspect: dict[str, Any],
    ownership: Ownership,
    session_key: str,
    spec: SandboxSpec,
    defaults: Limits,
    *,
    host_dir: Path,
) -> tuple[str, MountState]:
    """Check an existing container's labels and configuration; return its id and mounts.

    Raises :class:`OwnershipError` for another key's or deployment's
    container, and for one whose configuration mango would not have made
    for ``spec`` (forged labels on a hand-made container). The mounts say
    whether the container predates the resource mounts (read from its
    configuration: see :mod:`mango_provider_docker.mounts`).
    """
    container_id = verify_ownership(inspect, ownership, session_key)
    problems = configuration_problems(inspect, spec, defaults, host_dir)
    if problems:
        name = str(inspect.get("Name", "")).lstrip("/") or container_id
        raise OwnershipError(
            f"refusing to use docker container {name}: it carries mango's labels but not "
            f"a configuration mango creates for this spec ({'; '.join(problems)})",
            hint=f"if mango did not make it, remove it (docker rm -f {name}); "
            "if the spec changed, delete the session to start afresh",
        )
    return container_id, mount_problems(
        inspect.get("HostConfig") or {}, host_dir, spec.memory_stores
    )[0]
