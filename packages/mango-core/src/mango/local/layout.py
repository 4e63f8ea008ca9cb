"""On-disk layout of local sandboxes and their owner records.

One directory per (namespace, Session key) under the provider's base directory::

    <base>/mango-<32 hex>/owner.json     owner record, outside the workspace
    <base>/mango-<32 hex>/workspace/     the workspace root (HOME and cwd of commands)

The directory name is the deterministic name of
:class:`~mango.provider.ownership.Ownership`, so it has a fixed length, never
reveals the raw key, and differs between deployments (namespaces) sharing one
base directory. The owner record holds the ownership labels (managed,
namespace, session hash) and the provider name: never the key itself and
never a secret. It sits beside the workspace, so the file tools (confined to
the workspace) cannot reach it; a command running as the same host user could,
which is one of the reasons the local provider is not an isolation boundary.

Destroy renames the directory out of the way first (see
:func:`mango.provider.hostdirs.remove_dir`), so a crash half-way never leaves a
directory that looks like a damaged live sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from mango.provider import (
    OwnedResource,
    OwnershipError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
)
from mango.provider.hostdirs import (
    DELETING_MARK,
    canonical_path,
    ensure_private_dir,
    host_errors,
    remove_dir,
    require_real_directory,
)
from mango.provider.ownership import NAME_PREFIX, Ownership

__all__ = [
    "MARKER_NAME",
    "PROVIDER_NAME",
    "SANDBOX_DIR_ENV",
    "WORKSPACE_NAME",
    "canonical_path",
    "check_base_dir",
    "ensure_session_dir",
    "expected_session_dir",
    "list_session_dirs",
    "owned_session_dir",
    "remove_session_dir",
    "verify_session_dir",
    "workspace_root",
]

PROVIDER_NAME = "local"
SANDBOX_DIR_ENV = "MANGO_LOCAL_SANDBOX_DIR"
MARKER_NAME = "owner.json"
WORKSPACE_NAME = "workspace"
_MARKER_FORMAT = 2


def expected_session_dir(base_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """The canonical session directory that ``session_key`` owns under ``base_dir``."""
    return canonical_path(base_dir) / ownership.name(session_key)


def workspace_root(session_dir: Path) -> Path:
    """The workspace root inside a session directory."""
    return session_dir / WORKSPACE_NAME


def _marker_document(ownership: Ownership, session_key: str) -> dict[str, Any]:
    return {
        "format": _MARKER_FORMAT,
        "provider": PROVIDER_NAME,
        "labels": ownership.labels(session_key),
    }


def _read_marker(session_dir: Path) -> dict[str, Any] | None:
    """Return the parsed marker, or None if it is missing, a link or unreadable JSON."""
    try:
        fd = os.open(session_dir / MARKER_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        raw = handle.read(64 * 1024)
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _marker_labels(session_dir: Path) -> dict[str, Any] | None:
    document = _read_marker(session_dir)
    if document is None or document.get("provider") != PROVIDER_NAME:
        return None
    labels = document.get("labels")
    return labels if isinstance(labels, dict) else None


def _check_marker(session_dir: Path, ownership: Ownership, session_key: str) -> None:
    ownership.check(_marker_labels(session_dir), session_key, what=f"local sandbox {session_dir}")


def _write_marker_if_absent(session_dir: Path, ownership: Ownership, session_key: str) -> None:
    # Write a complete temporary file, then hard-link it into place: link fails
    # if a marker exists, so concurrent creators never see a half-written one.
    final = session_dir / MARKER_NAME
    temporary = session_dir / f".{MARKER_NAME}.{secrets.token_hex(8)}.tmp"
    payload = json.dumps(_marker_document(ownership, session_key), sort_keys=True).encode("utf-8")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            final.hardlink_to(temporary)
    finally:
        temporary.unlink(missing_ok=True)


def ensure_session_dir(base_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """Create-if-absent the session directory, owner record and workspace; return the directory.

    Idempotent and safe against concurrent callers for the same key. Raises
    :class:`OwnershipError` if the directory exists with a record that does
    not match ``session_key`` in this namespace.
    """
    session_dir = ensure_private_dir(
        canonical_path(base_dir), ownership.name(session_key), setting=SANDBOX_DIR_ENV
    )
    with host_errors(base_dir, setting=SANDBOX_DIR_ENV, what="cannot create a local sandbox"):
        _write_marker_if_absent(session_dir, ownership, session_key)
        _check_marker(session_dir, ownership, session_key)
        root = workspace_root(session_dir)
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o755)
        require_real_directory(root, "local sandbox workspace")
    return session_dir


def owned_session_dir(
    base_dir: Path, ownership: Ownership, session_key: str, external_id: str
) -> Path | None:
    """The session directory ``external_id`` names if ``session_key`` owns it; None if gone.

    Checks the path (it must be this key's directory in this namespace) and
    the owner record, never anything inside the workspace. Raises
    :class:`OwnershipError` otherwise. Never creates anything.
    """
    expected = expected_session_dir(base_dir, ownership, session_key)
    if not Path(external_id).is_absolute() or canonical_path(external_id) != expected:
        raise OwnershipError(
            f"local sandbox reference {external_id!r} does not belong to this session "
            "in this deployment"
        )
    if not require_real_directory(expected, "local sandbox directory"):
        return None
    _check_marker(expected, ownership, session_key)
    return expected


def verify_session_dir(
    base_dir: Path, ownership: Ownership, session_key: str, external_id: str
) -> Path:
    """Check that ``external_id`` is the live session directory of ``session_key``.

    Raises :class:`OwnershipError` if it names another path or its owner
    record does not match, and :class:`SandboxNotFound` if it is gone.
    """
    session_dir = owned_session_dir(base_dir, ownership, session_key, external_id)
    if session_dir is None:
        raise SandboxNotFound(f"local sandbox {external_id} no longer exists")
    if not require_real_directory(workspace_root(session_dir), "local sandbox workspace"):
        raise SandboxNotFound(f"local sandbox workspace {workspace_root(session_dir)} is gone")
    return session_dir


def list_session_dirs(base_dir: Path, ownership: Ownership) -> list[OwnedResource]:
    """Every session directory under ``base_dir`` whose owner record names this namespace."""
    base = canonical_path(base_dir)
    try:
        entries = sorted(base.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ProviderUnavailable(f"cannot list local sandboxes under {base}: {exc}") from exc
    owned = []
    for entry in entries:
        if not entry.name.startswith(NAME_PREFIX) or DELETING_MARK in entry.name:
            continue
        session_hash = ownership.owned_hash(_marker_labels(entry))
        if session_hash is not None:
            owned.append(OwnedResource(SandboxRef(PROVIDER_NAME, str(entry)), session_hash))
    return owned


def check_base_dir(base_dir: Path) -> str:
    """Make sure sandboxes can be created under ``base_dir``; return a one-line description.

    Creates the directory if needed and proves it writable with a probe file.
    """
    base = canonical_path(base_dir)
    with host_errors(base, setting=SANDBOX_DIR_ENV, what="local sandboxes cannot be created"):
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe = base / f".probe-{secrets.token_hex(8)}"
        probe.mkdir(mode=0o700)
        probe.rmdir()
    return f"base directory {base} is writable"


def remove_session_dir(session_dir: Path) -> None:
    """Remove a session directory and any half-deleted leftovers of it. Idempotent."""
    remove_dir(session_dir)
