"""Provider-owned directories on the worker host: create private, remove crash-safely.

The local provider keeps each workspace in one; the Docker provider keeps the
host side of each container's mounts in one. Both name the directory with the
deterministic name from :class:`~mango.provider.ownership.Ownership`, so two
deployments sharing a base directory never share a directory.

Removal first renames ``<name>`` to ``<name>.deleting-<token>``
(:func:`retire_dir`: the commit point, atomic for anyone looking the name up)
and then removes every such leftover (:func:`purge_leftovers`), so a crash
half-way never leaves something that looks like a damaged live directory; a
later removal of the same name finishes the leftovers. The name is the owner's
deterministic name (a hash of provider, namespace and Session key), so the
leftovers are found by the ownership record that the name is, without
trusting anything inside them. A link or a file put where the directory was
is removed as such, never followed.

:func:`observe_removals` lets crash-injection tests stop the process between
these steps (see :mod:`mango.temporal.faults`); nothing observes them otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from mango.domain.errors import ConfigurationError, OwnershipError, ProviderUnavailable

__all__ = [
    "DELETING_MARK",
    "RemovalStep",
    "absolute_dir_setting",
    "canonical_path",
    "ensure_private_dir",
    "host_errors",
    "is_real_directory",
    "leftovers",
    "observe_removals",
    "purge_leftovers",
    "remove_dir",
    "require_real_directory",
    "retire_dir",
]

DELETING_MARK = ".deleting-"
"""Infix of a directory whose removal has begun; such a directory is never live."""

RemovalStep = Literal["renamed", "removed"]
"""``renamed``: a directory was renamed to a leftover; ``removed``: its leftovers are gone."""

_observers: list[Callable[[RemovalStep, Path], None]] = []


def observe_removals(observer: Callable[[RemovalStep, Path], None]) -> Callable[[], None]:
    """Call ``observer(step, path)`` after each step of every removal; return the undo.

    For crash-injection tests only (:mod:`mango.temporal.faults`): an
    observer that kills the process leaves exactly the state a crash at that
    step leaves.
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def _notify(step: RemovalStep, path: Path) -> None:
    for observer in _observers:
        observer(step, path)


def canonical_path(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` made absolute with every existing symlink resolved.

    Components that do not exist are kept as written, so two references can be
    compared even after the base directory was deleted (``/tmp`` and
    ``/private/tmp`` still compare equal where one links to the other).
    """
    # os.path.realpath rather than Path.resolve: on a symlink loop it returns
    # a path instead of raising, and the comparison then simply fails.
    return Path(os.path.realpath(os.fspath(path)))


def absolute_dir_setting(name: str, value: str) -> Path:
    """The directory a setting ``name`` gives (``~`` expanded); it must be absolute.

    Raises :class:`ConfigurationError` naming the setting otherwise.
    """
    path = Path(value).expanduser()
    if not path.is_absolute():
        # A relative directory would move with the worker's cwd and orphan
        # every sandbox persisted before a restart.
        raise ConfigurationError(f"{name} must be an absolute path, got {value!r}")
    return path


@contextlib.contextmanager
def host_errors(base_dir: Path, *, setting: str, what: str) -> Iterator[None]:
    """Map OS errors while making things under ``base_dir`` to mango errors.

    Permission and type clashes (a file where a directory belongs) are a
    :class:`ConfigurationError` whose hint names ``setting``, the variable that
    chooses ``base_dir``; any other OS error is :class:`ProviderUnavailable`.
    ``what`` says what was being done, for the message.
    """
    try:
        yield
    except (PermissionError, NotADirectoryError, FileExistsError) as exc:
        raise ConfigurationError(
            f"{what} under {base_dir}: {exc}",
            hint=f"point {setting} at a writable directory",
        ) from exc
    except OSError as exc:
        raise ProviderUnavailable(f"{what} under {base_dir}: {exc}") from exc


def is_real_directory(path: Path) -> bool:
    """True if ``path`` is a directory and not a symlink to one."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def require_real_directory(path: Path, what: str) -> bool:
    """True if ``path`` is a real directory, False if missing; raise if it is anything else."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        raise OwnershipError(f"{what} {path} is not a plain directory")
    return True


def ensure_private_dir(base_dir: Path, name: str, *, setting: str) -> Path:
    """Create-if-absent ``base_dir / name`` (mode 0700, parents as needed) and return it.

    Safe against concurrent callers. ``setting`` names the variable that
    chooses ``base_dir``, for the hint of the :class:`ConfigurationError`
    raised when it is not writable; other I/O failures are
    :class:`ProviderUnavailable`.
    """
    path = base_dir / name
    with host_errors(base_dir, setting=setting, what="cannot create directories"):
        base_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        require_real_directory(path, "provider directory")
    return path


def _grant_owner_access(path: Path) -> None:
    # lstat first: chmod follows symlinks, and a link must never redirect it.
    if is_real_directory(path):
        with contextlib.suppress(OSError):
            path.chmod(0o700)


def _on_rmtree_error(function: Callable[..., Any], name: str, error: BaseException) -> None:
    # Commands may leave directories without write or search permission. As
    # the owner we may give access back; without this a non-root worker could
    # never remove such a tree, however often it retried.
    del function
    if isinstance(error, FileNotFoundError):
        return
    if not isinstance(error, PermissionError):
        raise error
    path = Path(name)
    _grant_owner_access(path.parent)
    if is_real_directory(path):
        _grant_owner_access(path)
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _rmtree(path: Path) -> None:
    if not is_real_directory(path):
        # A link or a file where a directory was (a command swapped it): the
        # entry itself goes, whatever it points to stays.
        path.unlink(missing_ok=True)
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_on_rmtree_error)
    else:
        shutil.rmtree(
            path, onerror=lambda function, name, info: _on_rmtree_error(function, name, info[1])
        )


def retire_dir(path: Path) -> bool:
    """Rename ``path`` to a ``.deleting-`` leftover (a removal's commit point); idempotent.

    Returns False if there was nothing to rename. A link or a file at
    ``path`` is renamed as it is, never followed. Raises
    :class:`ProviderUnavailable` if the rename fails.
    """
    try:
        path.rename(path.with_name(path.name + DELETING_MARK + secrets.token_hex(8)))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise ProviderUnavailable(f"cannot remove {path}: {exc}") from exc
    _notify("renamed", path)
    return True


def leftovers(path: Path) -> list[Path]:
    """The ``.deleting-`` leftovers of ``path``: removals that began and did not finish."""
    prefix = path.name + DELETING_MARK
    try:
        return sorted(entry for entry in path.parent.iterdir() if entry.name.startswith(prefix))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ProviderUnavailable(f"cannot list {path.parent}: {exc}") from exc


def purge_leftovers(path: Path, *, remove: Callable[[Path], None] | None = None) -> None:
    """Remove every leftover of ``path`` (never following a link); idempotent.

    ``remove`` removes one leftover (default: :func:`shutil.rmtree`, giving
    the owner's access back where a command took it); the local provider
    passes its walk that never crosses a mount point. Raises
    :class:`ProviderUnavailable` if something cannot be removed (an
    :class:`OSError` of ``remove``; its own mango errors pass through).
    """
    for entry in leftovers(path):
        try:
            (remove or _rmtree)(entry)
        except OSError as exc:
            raise ProviderUnavailable(f"cannot remove {path}: {exc}") from exc
    _notify("removed", path)


def remove_dir(path: Path) -> None:
    """Remove ``path`` and any half-removed leftovers of it: retire, then purge. Idempotent.

    Raises :class:`ProviderUnavailable` if something cannot be removed.
    """
    retire_dir(path)
    purge_leftovers(path)
