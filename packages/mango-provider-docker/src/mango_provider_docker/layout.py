"""Names, ownership labels and provider-owned host directories.

One container per Session key::

    name    mango-<32 hex>                        session_key_hash(key), fixed length
    labels  io.mango.managed-by=mango
            io.mango.provider=docker
            io.mango.session-key-sha256=<64 hex>  sha256 of the key, never the key

The name is the provider-side idempotency key: two creates for one key race
on it and the daemon lets exactly one win. The labels are the proof of
ownership that attach and create check before using a container; a container
with the right name but without them is someone else's
(:class:`OwnershipError`).

Each sandbox also owns a host directory ``<resource dir>/session-<32 hex>/``
(mode 0700), created with the container and removed by destroy, for the
mounts that later capabilities add. Destroy renames it to
``session-<hash>.deleting-<token>`` first, so a crash half-way never leaves
something that looks like a live sandbox's directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import re
import secrets
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mango.domain.errors import (
    ConfigurationError,
    InvalidInput,
    OwnershipError,
    ProviderUnavailable,
)
from mango.domain.hashing import session_key_hash

__all__ = [
    "CONTAINER_ID",
    "LABEL_MANAGED_BY",
    "LABEL_PROVIDER",
    "LABEL_SESSION",
    "MANAGED_BY",
    "PROVIDER_NAME",
    "WORKSPACE",
    "check_container_id",
    "container_name",
    "ensure_host_dir",
    "host_dir",
    "ownership_labels",
    "remove_host_dir",
    "session_sha256",
    "verify_ownership",
]

PROVIDER_NAME = "docker"
WORKSPACE = "/workspace"
"""The workspace root inside every container (its working directory)."""
MANAGED_BY = "mango"
LABEL_MANAGED_BY = "io.mango.managed-by"
LABEL_PROVIDER = "io.mango.provider"
LABEL_SESSION = "io.mango.session-key-sha256"
CONTAINER_ID = re.compile(r"[0-9a-f]{64}\Z")
"""A full container id: the only form a reference of this provider holds."""
_DELETING = ".deleting-"


def session_sha256(session_key: str) -> str:
    """The full sha256 hex of a Session key: the ownership label value."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()


def container_name(session_key: str) -> str:
    """The deterministic container name of ``session_key``: ``mango-<32 hex>``."""
    return "mango-" + session_key_hash(session_key)


def ownership_labels(session_key: str) -> dict[str, str]:
    """The labels that mark a container as this Session's sandbox."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PROVIDER: PROVIDER_NAME,
        LABEL_SESSION: session_sha256(session_key),
    }


def verify_ownership(inspect: Mapping[str, Any], session_key: str) -> str:
    """Check an inspect document against ``session_key``; return the container id.

    Raises :class:`OwnershipError` if the container is not managed by mango's
    Docker provider, or belongs to another Session key.
    """
    container_id = str(inspect.get("Id", ""))
    name = str(inspect.get("Name", "")).lstrip("/")
    config = inspect.get("Config")
    labels = config.get("Labels") if isinstance(config, Mapping) else None
    if not isinstance(labels, Mapping):
        labels = {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_PROVIDER) != PROVIDER_NAME:
        raise OwnershipError(
            f"refusing to use docker container {name or container_id}: "
            "it is not managed by mango's docker provider"
        )
    if labels.get(LABEL_SESSION) != session_sha256(session_key) or name != container_name(
        session_key
    ):
        raise OwnershipError(f"docker container {name or container_id} belongs to another session")
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


def host_dir(resource_dir: Path, session_key: str) -> Path:
    """The host directory owned by the sandbox of ``session_key``."""
    return resource_dir / ("session-" + session_key_hash(session_key))


def ensure_host_dir(resource_dir: Path, session_key: str) -> Path:
    """Create-if-absent the sandbox's host directory (0700) and return it."""
    path = host_dir(resource_dir, session_key)
    try:
        resource_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        if not stat.S_ISDIR(path.lstat().st_mode):
            raise ConfigurationError(f"sandbox host directory {path} is not a plain directory")
    except (PermissionError, NotADirectoryError, FileExistsError) as exc:
        raise ConfigurationError(
            f"cannot create sandbox host directories under {resource_dir}: {exc}",
            hint="point MANGO_SANDBOX_RESOURCE_DIR at a writable directory",
        ) from exc
    except OSError as exc:
        raise ProviderUnavailable(f"cannot create {path}: {exc}") from exc
    return path


def remove_host_dir(path: Path) -> None:
    """Remove a sandbox's host directory and any half-deleted leftover of it; idempotent."""
    prefix = path.name + _DELETING
    try:
        path.rename(path.with_name(prefix + secrets.token_hex(8)))
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise ProviderUnavailable(f"cannot remove {path}: {exc}") from exc
    try:
        leftovers = [entry for entry in path.parent.iterdir() if entry.name.startswith(prefix)]
    except FileNotFoundError:
        return
    for entry in leftovers:
        try:
            shutil.rmtree(entry)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ProviderUnavailable(f"cannot remove {entry}: {exc}") from exc
