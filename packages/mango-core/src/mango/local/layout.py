"""On-disk layout of local sandboxes and their ownership markers.

One directory per Session key under the provider's base directory::

    <base>/session-<hash>/owner.json     ownership marker, outside the workspace
    <base>/session-<hash>/workspace/     the workspace root (HOME and cwd of commands)

``<hash>`` is :func:`~mango.domain.hashing.session_key_hash` of the key, so
the name has a fixed length and never reveals the raw key. The marker holds
the full sha256 of the key and the provider name: never the key itself and
never a secret. It sits beside the workspace, so the file tools (confined to
the workspace) cannot reach it; a command running as the same host user could,
which is one of the reasons the local provider is not an isolation boundary.

Destroy first renames the session directory to ``session-<hash>.deleting-<token>``
(the commit point, atomic for attach) and then removes that tree, so a crash
half-way never leaves a directory that looks like a damaged live sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mango.domain.errors import (
    ConfigurationError,
    OwnershipError,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.domain.hashing import session_key_hash

__all__ = [
    "MARKER_NAME",
    "PROVIDER_NAME",
    "WORKSPACE_NAME",
    "canonical_path",
    "ensure_session_dir",
    "expected_session_dir",
    "remove_session_dir",
    "verify_session_dir",
    "workspace_root",
]

PROVIDER_NAME = "local"
MARKER_NAME = "owner.json"
WORKSPACE_NAME = "workspace"
_MARKER_FORMAT = 1
_DELETING = ".deleting-"


def canonical_path(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` made absolute with every existing symlink resolved.

    Components that do not exist are kept as written, so two references can be
    compared even after the base directory was deleted (``/tmp`` and
    ``/private/tmp`` still compare equal where one links to the other).
    """
    # os.path.realpath rather than Path.resolve: on a symlink loop it returns
    # a path instead of raising, and the comparison then simply fails.
    return Path(os.path.realpath(os.fspath(path)))


def expected_session_dir(base_dir: Path, session_key: str) -> Path:
    """The canonical session directory that ``session_key`` owns under ``base_dir``."""
    return canonical_path(base_dir) / ("session-" + session_key_hash(session_key))


def workspace_root(session_dir: Path) -> Path:
    """The workspace root inside a session directory."""
    return session_dir / WORKSPACE_NAME


def _marker_document(session_key: str) -> dict[str, Any]:
    return {
        "format": _MARKER_FORMAT,
        "provider": PROVIDER_NAME,
        "session_key_sha256": hashlib.sha256(session_key.encode("utf-8")).hexdigest(),
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


def _check_marker(session_dir: Path, session_key: str) -> None:
    if _read_marker(session_dir) != _marker_document(session_key):
        raise OwnershipError(
            f"local sandbox {session_dir} has no ownership marker for this session "
            "(missing, altered or written for another session)"
        )


def _write_marker_if_absent(session_dir: Path, session_key: str) -> None:
    # Write a complete temporary file, then hard-link it into place: link fails
    # if a marker exists, so concurrent creators never see a half-written one.
    final = session_dir / MARKER_NAME
    temporary = session_dir / f".{MARKER_NAME}.{secrets.token_hex(8)}.tmp"
    payload = json.dumps(_marker_document(session_key), sort_keys=True).encode("utf-8")
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


def _require_real_directory(path: Path, what: str) -> bool:
    """True if ``path`` is a real directory, False if missing; raise if it is anything else."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        raise OwnershipError(f"local sandbox {what} {path} is not a plain directory")
    return True


def ensure_session_dir(base_dir: Path, session_key: str) -> Path:
    """Create-if-absent the session directory, marker and workspace; return the directory.

    Idempotent and safe against concurrent callers for the same key. Raises
    :class:`OwnershipError` if the directory exists with a marker that does
    not match ``session_key``.
    """
    try:
        base_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        session_dir = expected_session_dir(base_dir, session_key)
        with contextlib.suppress(FileExistsError):
            session_dir.mkdir(mode=0o700)
        _require_real_directory(session_dir, "directory")
        _write_marker_if_absent(session_dir, session_key)
        _check_marker(session_dir, session_key)
        root = workspace_root(session_dir)
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o755)
        _require_real_directory(root, "workspace")
    except (PermissionError, NotADirectoryError, FileExistsError) as exc:
        raise ConfigurationError(
            f"cannot create local sandboxes under {base_dir}: {exc}",
            hint="point MANGO_LOCAL_SANDBOX_DIR at a writable directory",
        ) from exc
    except OSError as exc:
        raise ProviderUnavailable(f"cannot create local sandbox under {base_dir}: {exc}") from exc
    return session_dir


def verify_session_dir(base_dir: Path, session_key: str, external_id: str) -> Path:
    """Check that ``external_id`` is the live session directory of ``session_key``.

    Raises :class:`OwnershipError` if it names another path or its marker does
    not match, and :class:`SandboxNotFound` if it is gone. Never creates anything.
    """
    expected = expected_session_dir(base_dir, session_key)
    if not Path(external_id).is_absolute() or canonical_path(external_id) != expected:
        raise OwnershipError(
            f"local sandbox reference {external_id!r} does not belong to this session"
        )
    if not _require_real_directory(expected, "directory"):
        raise SandboxNotFound(f"local sandbox {expected} no longer exists")
    _check_marker(expected, session_key)
    if not _require_real_directory(workspace_root(expected), "workspace"):
        raise SandboxNotFound(f"local sandbox workspace {workspace_root(expected)} is gone")
    return expected


def _is_real_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _grant_owner_access(path: Path) -> None:
    # lstat first: chmod follows symlinks, and a link must never redirect it.
    if _is_real_directory(path):
        with contextlib.suppress(OSError):
            path.chmod(0o700)


def _on_rmtree_error(function: Callable[..., Any], name: str, error: BaseException) -> None:
    # Commands may leave directories without write or search permission. As
    # the owner we may give access back; without this a non-root worker could
    # never destroy such a sandbox, however often it retried.
    del function
    if isinstance(error, FileNotFoundError):
        return
    if not isinstance(error, PermissionError):
        raise error
    path = Path(name)
    _grant_owner_access(path.parent)
    if _is_real_directory(path):
        _grant_owner_access(path)
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _rmtree(path: Path) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_on_rmtree_error)
    else:
        shutil.rmtree(
            path, onerror=lambda function, name, info: _on_rmtree_error(function, name, info[1])
        )


def remove_session_dir(session_dir: Path) -> None:
    """Remove a session directory and any half-deleted leftovers of it. Idempotent."""
    prefix = session_dir.name + _DELETING
    try:
        session_dir.rename(session_dir.with_name(prefix + secrets.token_hex(8)))
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise ProviderUnavailable(f"cannot remove local sandbox {session_dir}: {exc}") from exc
    try:
        leftovers = [
            entry for entry in session_dir.parent.iterdir() if entry.name.startswith(prefix)
        ]
    except FileNotFoundError:
        return
    for entry in leftovers:
        try:
            _rmtree(entry)
        except OSError as exc:
            raise ProviderUnavailable(f"cannot remove local sandbox {session_dir}: {exc}") from exc
