"""Names, ownership labels and provider-owned host directories.

One container per (namespace, Session key), named and labelled by
:class:`~mango.provider.ownership.Ownership`::

    name    mango-<32 hex>              sha256(provider, namespace, key), fixed length
    labels  io.mango.managed=true
            io.mango.namespace=<namespace>
            io.mango.session_key=<32 hex> first 16 bytes of sha256(key)

The name is the provider-side idempotency key: two creates for one key race
on it and the daemon lets exactly one win. The labels are the proof of
ownership that create, attach and destroy check before touching a container;
a container with the right name but without them is someone else's
(:class:`OwnershipError`), and ``list_owned`` selects by them.

Each sandbox also owns a host directory ``<resource dir>/<container name>/``
(mode 0700), created with the container and removed by destroy (see
:mod:`mango.provider.hostdirs`), for the mounts that later capabilities add.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mango.provider import (
    Capability,
    CapabilitySet,
    InvalidInput,
    OwnershipError,
    ProviderUnavailable,
)
from mango.provider.hostdirs import ensure_private_dir
from mango.provider.ownership import Ownership

__all__ = [
    "API_VERSION_ENV",
    "CAPABILITIES",
    "CONTAINER_ID",
    "DEFAULT_CPUS",
    "DEFAULT_IMAGE",
    "DEFAULT_MEMORY",
    "DEFAULT_PIDS_LIMIT",
    "PROVIDER_NAME",
    "RESOURCE_DIR_ENV",
    "WORKSPACE",
    "check_container_id",
    "container_labels",
    "ensure_host_dir",
    "host_dir",
    "verify_ownership",
]

PROVIDER_NAME = "docker"
CAPABILITIES = CapabilitySet.of(
    Capability.PACKAGE_SETUP,
    Capability.FILE_RESOURCES,
    Capability.SESSION_OUTPUTS,
    Capability.FILE_API,
    Capability.PAUSE,
    Capability.EXPOSED_PORTS,
    Capability.BACKGROUND_PROCESSES,
    Capability.SKILL_BUNDLES,
)
"""What the provider declares and reports: package setup (through exec, on its own network),
File Resources, Session outputs and skill bundles (provider-owned mounts), the file API (the kit's
exec fallback, :class:`~mango.provider.ExecFileSystem`), pause (Engine pause/unpause),
exposed ports (published on 127.0.0.1 when a container is created) and background processes
(a supervisor in the container, :mod:`mango_provider_docker.processes`)."""
WORKSPACE = "/workspace"
"""The workspace root inside every container (its working directory)."""
RESOURCE_DIR_ENV = "MANGO_SANDBOX_RESOURCE_DIR"
API_VERSION_ENV = "DOCKER_API_VERSION"
"""Pins the Engine API version (default: the daemon's own)."""
CONTAINER_ID = re.compile(r"[0-9a-f]{64}\Z")
"""A full container id: the only form a reference of this provider holds."""
DEFAULT_IMAGE = "alpine:latest"
"""Image of sandboxes whose spec names none (``MANGO_SANDBOX_IMAGE`` overrides it)."""
DEFAULT_MEMORY = "1g"
DEFAULT_CPUS = 1.0
DEFAULT_PIDS_LIMIT = 512


def container_labels(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The labels of an inspect document (``Config.Labels``) or a list entry (``Labels``)."""
    config = document.get("Config")
    labels = config.get("Labels") if isinstance(config, Mapping) else document.get("Labels")
    return labels if isinstance(labels, Mapping) else {}


def verify_ownership(inspect: Mapping[str, Any], ownership: Ownership, session_key: str) -> str:
    """Check an inspect document against ``session_key`` in this namespace; return the id.

    Raises :class:`OwnershipError` if the container is unmanaged, belongs to
    another deployment, or to another Session key (by its labels and its name).
    """
    container_id = str(inspect.get("Id", ""))
    name = str(inspect.get("Name", "")).lstrip("/")
    what = f"docker container {name or container_id}"
    ownership.check(container_labels(inspect), session_key, what=what)
    if name != ownership.name(session_key):
        # The labels match but the name does not: a copy or a rename, not the container
        # create made for this key, so it must not be taken for it.
        raise OwnershipError(f"refusing to use {what}: it belongs to another session")
    if not CONTAINER_ID.match(container_id):
        raise ProviderUnavailable(
            f"the Docker Engine reported a malformed container id {container_id!r}"
        )
    return container_id


def check_container_id(external_id: str) -> str:
    """Return ``external_id`` if it is a full container id, else raise :class:`InvalidInput`."""
    if not CONTAINER_ID.match(external_id):
        raise InvalidInput(
            f"docker sandbox reference {external_id[:80]!r} is not a full container id"
        )
    return external_id


def host_dir(resource_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """The host directory owned by the sandbox of ``session_key`` in this namespace."""
    return resource_dir / ownership.name(session_key)


def ensure_host_dir(resource_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """Create-if-absent the sandbox's host directory (0700) and return it."""
    return ensure_private_dir(resource_dir, ownership.name(session_key), setting=RESOURCE_DIR_ENV)
