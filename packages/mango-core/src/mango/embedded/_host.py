"""Host-level helpers for the embedded PostgreSQL: file locks, processes, accounts, ports.

They are POSIX-only (``fcntl``, ``pwd``) and keep :mod:`mango.embedded.postgres`
about the server's life cycle rather than about ``/proc``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import socket
import stat
import sys
from pathlib import Path

import attrs

from mango.domain.errors import ConfigurationError

__all__ = [
    "RUN_AS_ENV",
    "Account",
    "find_unreachable",
    "free_port",
    "is_process_alive",
    "is_server_of",
    "lock_is_free",
    "port_is_free",
    "processes_in",
    "run_as_account",
    "touch",
]

RUN_AS_ENV = "MANGO_POSTGRES_USER"
"""Names the account that runs PostgreSQL when mango itself runs as root."""

# Tried in order when mango runs as root and nothing else decides: the
# conventional PostgreSQL account, then the one unprivileged account every
# POSIX system has. Accounts are never created: that is the operator's call.
_FALLBACK_ACCOUNTS = ("postgres", "nobody")
_HAS_PROC = sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


@attrs.frozen
class Account:
    """An unprivileged system account that initdb and the server run as."""

    name: str
    uid: int
    gid: int


def touch(fd: int) -> None:
    """Record a use of the server: the holders file's mtime is when it was last used."""
    with contextlib.suppress(OSError):
        os.utime(fd)


def lock_is_free(path: Path, *, shared_ok: bool) -> bool:
    """True if nobody holds ``path`` (``flock``); with ``shared_ok``, only exclusive counts."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared_ok else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def is_process_alive(pid: int) -> bool:
    """True if ``pid`` names a process that has not exited (zombies count as exited)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, but owned by another user
    if _HAS_PROC:
        return _proc_state(pid) not in (None, "Z", "X")
    return True


def is_server_of(pid: int, data_dir: Path) -> bool:
    """True if ``pid`` is a live PostgreSQL process serving ``data_dir``.

    A postmaster changes into its data directory, so on Linux its working
    directory identifies it even after the pid was reused by an unrelated
    process. Elsewhere any live process is assumed to be the server: a wrong
    guess makes PostgreSQL refuse to start, never two servers on one directory.
    """
    if not is_process_alive(pid):
        return False
    if not _HAS_PROC:
        return True
    return _proc_comm(pid) == "postgres" and _proc_cwd(pid) == data_dir.resolve()


def processes_in(data_dir: Path) -> list[int]:
    """Live ``postgres`` processes working in ``data_dir`` (Linux; elsewhere empty).

    After a postmaster is killed, its children keep the old shared memory
    attached for a moment; PostgreSQL refuses to start until they are gone.
    """
    if not _HAS_PROC:
        return []
    target = data_dir.resolve()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if (
                _proc_comm(pid) == "postgres"
                and _proc_cwd(pid) == target
                and _proc_state(pid) not in (None, "Z", "X")
            ):
                found.append(pid)
    return found


def _proc_state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # "pid (comm) S ...": comm may contain spaces and parentheses, so split after the last ")".
    _, _, rest = text.rpartition(")")
    return rest.split(maxsplit=1)[0] if rest.strip() else None


def _proc_comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _proc_cwd(pid: int) -> Path | None:
    try:
        return Path(f"/proc/{pid}/cwd").readlink()
    except OSError:
        return None


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if a server could listen on ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # PostgreSQL sets SO_REUSEADDR too, so TIME_WAIT leftovers do not count as busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


def run_as_account(data_dir: Path) -> Account | None:
    """The account PostgreSQL must run as, or None to run it as ourselves.

    PostgreSQL refuses to run with effective uid 0. As root, the account is, in
    order: ``MANGO_POSTGRES_USER``; the owner of an existing data directory;
    ``postgres``; ``nobody``. Raises :class:`ConfigurationError` if none fits.
    """
    if os.geteuid() != 0:
        return None
    hint = (
        f"set {RUN_AS_ENV} to an existing unprivileged account, run mango as a "
        "non-root user, or set MANGO_DATABASE_URL to use an existing server"
    )
    configured = os.environ.get(RUN_AS_ENV, "").strip()
    if configured:
        entry = _lookup(configured)
        if entry is None:
            raise ConfigurationError(f"{RUN_AS_ENV}={configured!r} is not an account", hint=hint)
    else:
        entry = _data_dir_owner(data_dir)
        for name in _FALLBACK_ACCOUNTS:
            if entry is not None:
                break
            entry = _lookup(name)
        if entry is None:
            raise ConfigurationError(
                "PostgreSQL refuses to run as root and no unprivileged account "
                f"({', '.join(_FALLBACK_ACCOUNTS)}) exists to run it as",
                hint=hint,
            )
    if entry.pw_uid == 0:
        raise ConfigurationError(
            f"PostgreSQL refuses to run as root, and account {entry.pw_name!r} has uid 0",
            hint=hint,
        )
    return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid)


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        return None


def _data_dir_owner(data_dir: Path) -> pwd.struct_passwd | None:
    try:
        uid = data_dir.stat().st_uid
    except OSError:
        return None
    if uid == 0:
        return None
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        raise ConfigurationError(
            f"{data_dir} is owned by uid {uid}, which has no account to run PostgreSQL as",
            hint=f"set {RUN_AS_ENV} to the account owning {data_dir}, or move the directory away",
        ) from None


def find_unreachable(account: Account, path: Path) -> Path | None:
    """The first directory on the way to ``path`` that ``account`` cannot search, or None.

    Evaluates the mode bits the way the kernel does for a process with only
    the account's primary group (which is how we start it); ACLs are ignored.
    """
    for part in (*reversed(path.parents), path):
        try:
            info = part.stat()
        except FileNotFoundError:
            return None  # we create the rest ourselves, searchable by the account
        if not stat.S_ISDIR(info.st_mode):
            return None
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return part
    return None
