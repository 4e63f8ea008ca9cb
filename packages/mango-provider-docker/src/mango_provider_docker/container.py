"""The container behind a sandbox: its create body and its resource limits.

Every sandbox container:

* runs an idle ``/bin/sh`` loop as its main process, under the Engine's init
  (``HostConfig.Init``: docker-init/tini as PID 1 reaps orphaned zombies);
* has ``/workspace`` as its working directory (the daemon creates it);
* has no network (``NetworkMode=none``) unless the spec asks for ``bridge``;
* has memory, CPU and pids limits: the spec's values, else the provider's
  defaults (``0`` in a default means "no limit");
* carries the ownership labels of :mod:`mango_provider_docker.layout`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import attrs

from mango.provider import InvalidInput, NetworkMode, SandboxSpec
from mango_provider_docker.execution import SAFE_PATH, SHELL
from mango_provider_docker.layout import WORKSPACE

__all__ = [
    "IDLE_SCRIPT",
    "MIN_MEMORY_BYTES",
    "Limits",
    "container_config",
    "default_limits",
    "parse_memory",
    "resolve_limits",
]

IDLE_SCRIPT = "while :; do sleep 3600; done"
"""The main process: keeps the container alive so commands can be exec-ed into it."""
MIN_MEMORY_BYTES = 6 * 1024 * 1024
"""The smallest memory limit the Docker Engine accepts."""

_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\Z", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_memory(text: str) -> int:
    """Parse a Docker memory size (``512m``, ``1g``, ``1.5GiB``, ``1048576``) into bytes.

    Units are binary, as the docker CLI reads them. ``0`` means no limit.
    Raises :class:`InvalidInput` for anything else or a limit below 6 MiB.
    """
    match = _MEMORY.match(text.strip())
    if match is None:
        raise InvalidInput(f"memory limit {text!r} is not a size such as 512m or 2g")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value and value < MIN_MEMORY_BYTES:
        raise InvalidInput(f"memory limit {text!r} is below the Docker minimum of 6m")
    return value


@attrs.frozen
class Limits:
    """Resource limits of one container; ``None`` leaves the daemon's default (none)."""

    memory_bytes: int | None = None
    nano_cpus: int | None = None
    pids_limit: int | None = None


def _nano_cpus(cpus: float) -> int | None:
    if not math.isfinite(cpus) or cpus < 0:
        raise InvalidInput(f"cpus must be a positive number, got {cpus!r}")
    if cpus == 0:
        return None
    nano = round(cpus * 1e9)
    if nano <= 0 or nano >= 2**63:
        raise InvalidInput(f"cpus {cpus!r} is out of range")
    return nano


def resolve_limits(spec: SandboxSpec, defaults: Limits) -> Limits:
    """The spec's limits where it sets them, else ``defaults``."""
    memory = defaults.memory_bytes
    if spec.memory is not None:
        memory = parse_memory(spec.memory) or None
    nano_cpus = defaults.nano_cpus if spec.cpus is None else _nano_cpus(float(spec.cpus))
    pids = defaults.pids_limit if spec.pids_limit is None else int(spec.pids_limit)
    return Limits(memory_bytes=memory, nano_cpus=nano_cpus, pids_limit=pids)


def default_limits(memory: str, cpus: float, pids_limit: int) -> Limits:
    """Provider defaults from settings values; ``0`` (or ``"0"``) means no limit."""
    if pids_limit < 0:
        raise InvalidInput(f"pids limit must be zero or positive, got {pids_limit}")
    return Limits(
        memory_bytes=parse_memory(memory) or None,
        nano_cpus=_nano_cpus(cpus),
        pids_limit=pids_limit or None,
    )


def container_config(
    *, image: str, spec: SandboxSpec, limits: Limits, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The body of ``POST /containers/create`` for one sandbox."""
    host_config: dict[str, Any] = {
        "Init": True,
        "NetworkMode": "bridge" if spec.network is NetworkMode.BRIDGE else "none",
        "RestartPolicy": {"Name": "no"},
    }
    if limits.memory_bytes is not None:
        host_config["Memory"] = limits.memory_bytes
    if limits.nano_cpus is not None:
        host_config["NanoCpus"] = limits.nano_cpus
    if limits.pids_limit is not None:
        host_config["PidsLimit"] = limits.pids_limit
    return {
        "Image": image,
        # [""] resets an image ENTRYPOINT, so the idle loop is the main process.
        "Entrypoint": [""],
        "Cmd": [SHELL, "-c", IDLE_SCRIPT],
        "WorkingDir": WORKSPACE,
        "Env": [f"PATH={SAFE_PATH}", f"HOME={WORKSPACE}"],
        "Labels": dict(labels),
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "OpenStdin": False,
        "HostConfig": host_config,
    }
