"""On-disk layout of local sandboxes, their owner records and their removal.

One session directory per (namespace, Session key) under the provider's base
directory, and mango's own records beside them, outside every session
directory::

    <base>/mango-<32 hex>/workspace/        the workspace root (HOME and cwd of commands)
    <base>/.owners/mango-<32 hex>.json      owner record (labels), read-only
    <base>/.runs/mango-<32 hex>             started commands (see mango.local.runs)
    <base>/.procs/mango-<32 hex>/           background processes (see mango.local.processes)
    <base>/.steps/mango-<32 hex>/           step records (see mango.provider.steps)

The directory name is the deterministic name of
:class:`~mango.provider.ownership.Ownership`, so it has a fixed length, never
reveals the raw key, and differs between deployments (namespaces) sharing one
base directory. The owner record holds the ownership labels (managed,
namespace, session hash) and the provider name: never the key itself and
never a secret. Commands start in the workspace; what they reach through
``..`` (the session directory) no longer decides anything: deleting or
replacing ``../owner.json`` (the place format 2 kept the record), or swapping
``workspace`` for a symlink, cannot make a Session undeletable. A command
running as the same host user could still reach ``<base>/.owners`` on
purpose, which is one of the reasons the local provider is not an isolation
boundary; a forced purge (``LocalProvider.purge(key, force=True)``) removes
what carries the key's name whatever the records say.

A format-2 record (``<session dir>/owner.json``) is read when the record
under ``.owners`` is missing and copied there at once, so sandboxes made
before keep working; changing the old file afterwards changes nothing.

Removal (:func:`remove_session`) is ordered so that a crash at any point
leaves the owner record in place until everything else is gone: rename the
session directory to a ``.deleting-`` leftover (the commit point), stop the
logged commands, remove the leftovers, the run log, and last the owner
record. The next destroy, purge or reconcile finishes what a crash left.
Every removal goes through :func:`mango.local.removal.remove_tree`, which
never crosses a mount point or follows a link, and stops with
:class:`~mango.domain.errors.RemovalBlocked` at a mount point or a file the
kernel pins (``chattr +i``); the next removal finishes once it is cleared.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mango.local.processes import remove_processes
from mango.local.removal import explain, remove_tree
from mango.local.runs import RUNS_DIR, kill_logged_runs, run_log
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
    is_real_directory,
    purge_leftovers,
    require_real_directory,
    retire_dir,
)
from mango.provider.ownership import NAME_PREFIX, Ownership

__all__ = [
    "LEGACY_MARKER_NAME",
    "OWNERS_DIR",
    "PROVIDER_NAME",
    "RUNS_DIR",
    "SANDBOX_DIR_ENV",
    "STEPS_DIR",
    "WORKSPACE_NAME",
    "canonical_path",
    "check_base_dir",
    "check_listed_dir",
    "check_reference",
    "check_removal",
    "ensure_session_dir",
    "expected_session_dir",
    "list_session_dirs",
    "owned_session_dir",
    "owner_record_path",
    "remove_session",
    "step_records_dir",
    "verify_session_dir",
    "workspace_root",
]

PROVIDER_NAME = "local"
SANDBOX_DIR_ENV = "MANGO_LOCAL_SANDBOX_DIR"
OWNERS_DIR = ".owners"
"""Directory under the base directory holding one owner record per sandbox."""
STEPS_DIR = ".steps"
"""Directory under the base directory holding the step records of each sandbox."""
LEGACY_MARKER_NAME = "owner.json"
"""Format 2 kept the owner record here, inside the session directory."""
WORKSPACE_NAME = "workspace"
_MARKER_FORMAT = 3
_RECORD_SUFFIX = ".json"


def expected_session_dir(base_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """The canonical session directory that ``session_key`` owns under ``base_dir``."""
    return canonical_path(base_dir) / ownership.name(session_key)


def workspace_root(session_dir: Path) -> Path:
    """The workspace root inside a session directory."""
    return session_dir / WORKSPACE_NAME


def owner_record_path(session_dir: Path) -> Path:
    """Where the owner record of ``session_dir`` lives (outside it)."""
    return session_dir.parent / OWNERS_DIR / (session_dir.name + _RECORD_SUFFIX)


def _record_document(labels: dict[str, Any]) -> dict[str, Any]:
    return {"format": _MARKER_FORMAT, "provider": PROVIDER_NAME, "labels": labels}


def _read_document(path: Path) -> dict[str, Any] | None:
    """The parsed record at ``path``; None if missing, a link, not a file or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
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


def _labels_of(document: dict[str, Any] | None) -> dict[str, Any] | None:
    if document is None or document.get("provider") != PROVIDER_NAME:
        return None
    labels = document.get("labels")
    return labels if isinstance(labels, dict) else None


def _write_record_if_absent(session_dir: Path, labels: dict[str, Any]) -> None:
    # Write a complete temporary file, then hard-link it into place: link fails
    # if a record exists, so concurrent creators never see a half-written one.
    final = owner_record_path(session_dir)
    final.parent.mkdir(mode=0o700, exist_ok=True)
    temporary = final.with_name(f".{final.name}.{secrets.token_hex(8)}.tmp")
    payload = json.dumps(_record_document(labels), sort_keys=True).encode("utf-8")
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


def _record_labels(session_dir: Path, *, migrate: bool = True) -> dict[str, Any] | None:
    """The labels of ``session_dir``'s owner record; a format-2 record is moved out first."""
    labels = _labels_of(_read_document(owner_record_path(session_dir)))
    if labels is not None or not is_real_directory(session_dir):
        return labels  # a format-2 record is never read through a link in the directory's place
    legacy = _labels_of(_read_document(session_dir / LEGACY_MARKER_NAME))
    if legacy is None or not migrate:
        return legacy
    with contextlib.suppress(OSError):
        _write_record_if_absent(session_dir, legacy)
    return _labels_of(_read_document(owner_record_path(session_dir))) or legacy


def _check_record(session_dir: Path, ownership: Ownership, session_key: str) -> None:
    ownership.check(_record_labels(session_dir), session_key, what=f"local sandbox {session_dir}")


def ensure_session_dir(base_dir: Path, ownership: Ownership, session_key: str) -> Path:
    """Create-if-absent the owner record, session directory and workspace; return the directory.

    The record is written first, so a directory of this name never exists
    without one (unless a command removed it). Idempotent and safe against
    concurrent callers for the same key. Raises :class:`OwnershipError` if
    the directory exists with a record that does not match ``session_key`` in
    this namespace, or with none.
    """
    base = canonical_path(base_dir)
    session_dir = base / ownership.name(session_key)
    with host_errors(base_dir, setting=SANDBOX_DIR_ENV, what="cannot create a local sandbox"):
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _record_labels(session_dir) is None and not os.path.lexists(session_dir):
            _write_record_if_absent(session_dir, ownership.labels(session_key))
    _check_record(session_dir, ownership, session_key)
    ensure_private_dir(base, session_dir.name, setting=SANDBOX_DIR_ENV)
    with host_errors(base_dir, setting=SANDBOX_DIR_ENV, what="cannot create a local sandbox"):
        root = workspace_root(session_dir)
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o755)
        require_real_directory(root, "local sandbox workspace")
        log = run_log(base, session_dir.name)
        log.parent.mkdir(mode=0o700, exist_ok=True)
        # Made here, once: the exec path only appends (creating a file per exec is slow).
        os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    return session_dir


def check_reference(
    base_dir: Path, ownership: Ownership, session_key: str, external_id: str
) -> Path:
    """The session directory ``external_id`` names; :class:`OwnershipError` unless it is the key's.

    A reference is the canonical path of the key's directory in this namespace.
    """
    expected = expected_session_dir(base_dir, ownership, session_key)
    given = Path(external_id)
    # The parent is resolved, never the last component: a command may have
    # swapped the session directory for a link, which must not move the check.
    if not given.is_absolute() or canonical_path(given.parent) / given.name != expected:
        raise OwnershipError(
            f"local sandbox reference {external_id!r} does not belong to this session "
            "in this deployment"
        )
    return expected


def owned_session_dir(
    base_dir: Path, ownership: Ownership, session_key: str, external_id: str
) -> Path | None:
    """The session directory ``external_id`` names if ``session_key`` owns it; None if gone.

    Checks the path (it must be this key's directory in this namespace) and
    the owner record, never anything inside the session directory. Raises
    :class:`OwnershipError` otherwise. Never creates anything. Whatever a
    command put in the directory's place (a link, a file) is still returned
    when the record is this key's: it is this Session's to destroy, though
    :func:`verify_session_dir` refuses to attach to it.
    """
    expected = check_reference(base_dir, ownership, session_key, external_id)
    if not os.path.lexists(expected):
        return None
    _check_record(expected, ownership, session_key)
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
    require_real_directory(session_dir, "local sandbox directory")
    if not require_real_directory(workspace_root(session_dir), "local sandbox workspace"):
        raise SandboxNotFound(f"local sandbox workspace {workspace_root(session_dir)} is gone")
    return session_dir


def check_removal(session_dir: Path, ownership: Ownership, session_key: str) -> None:
    """Raise :class:`OwnershipError` unless ``session_key`` may remove ``session_dir``.

    By the owner record only: another owner's record, or none beside an
    existing directory (someone else's directory under our name), refuses.
    Nothing there at all is fine (a removal that already finished).
    """
    labels = _record_labels(session_dir)
    if labels is not None or os.path.lexists(session_dir):
        ownership.check(labels, session_key, what=f"local sandbox {session_dir}")


def step_records_dir(base: Path, name: str) -> Path:
    """Where the sandbox ``name`` keeps its step records (:mod:`mango.provider.steps`)."""
    return base / STEPS_DIR / name


def remove_session(session_dir: Path) -> None:
    """Remove everything of ``session_dir``, owner record last; idempotent.

    In this order (see the module docstring): the session directory is
    renamed to a leftover (whatever it is: a link or a file is renamed as it
    is, never followed), the logged commands are killed, the leftovers and
    the run log are removed, and the owner record last. Ownership is the
    caller's to check (:func:`check_removal`).
    """
    base = session_dir.parent
    with host_errors(base, setting=SANDBOX_DIR_ENV, what="cannot remove a local sandbox"):
        _retire(session_dir)
        kill_logged_runs(base, session_dir.name)
        remove_processes(base, session_dir.name)
        remove_tree(step_records_dir(base, session_dir.name))
        # Never through a mount point, past a pinned file or along a link
        # (mango.local.removal); whatever blocks stays for the next removal.
        purge_leftovers(session_dir, remove=remove_tree)
        remove_tree(run_log(base, session_dir.name))
        remove_tree(owner_record_path(session_dir))


def _retire(session_dir: Path) -> None:
    """:func:`retire_dir`, saying so when a mount or an immutable flag pins the directory."""
    try:
        retire_dir(session_dir)
    except ProviderUnavailable as exc:
        cause = exc.__cause__
        blocked = explain(session_dir, cause) if isinstance(cause, OSError) else None
        if blocked is not None:
            raise blocked from exc
        raise


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
        session_hash = ownership.owned_hash(_record_labels(entry, migrate=False))
        if session_hash is not None:
            ref = SandboxRef(PROVIDER_NAME, str(entry))
            owned.append(OwnedResource(ref, session_hash, created_at=_record_time(entry)))
    return owned


def _record_time(session_dir: Path) -> datetime | None:
    """When the owner record was written (at create; it is never rewritten), if it exists."""
    try:
        written = os.lstat(owner_record_path(session_dir)).st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(written, UTC)


def check_listed_dir(base_dir: Path, ownership: Ownership, resource: OwnedResource) -> Path:
    """The session directory of a listed ``resource``, if its owner record still says so.

    For ``mango gc``, which knows the session hash but not the key: the path
    must be a session directory name directly under ``base_dir`` and its
    owner record this namespace's for ``resource.session_hash``
    (:class:`OwnershipError` otherwise; a directory already gone with its
    record is returned, for an idempotent removal).
    """
    given = Path(ownership.check_ref(resource.ref).external_id)
    base = canonical_path(base_dir)
    if (
        not given.is_absolute()
        or canonical_path(given.parent) != base
        or not given.name.startswith(NAME_PREFIX)
        or DELETING_MARK in given.name
    ):
        raise OwnershipError(f"local sandbox {given} is not a session directory under {base}")
    session_dir = base / given.name
    labels = _record_labels(session_dir, migrate=False)
    if labels is not None or os.path.lexists(session_dir):
        ownership.check_hash(labels, resource.session_hash, what=f"local sandbox {session_dir}")
    return session_dir


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
