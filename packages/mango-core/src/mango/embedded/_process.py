"""The life of an embedded PostgreSQL server process: find it, start it, stop it.

Every function here runs under the start lock (``D.lock``) its caller holds.
A ``postmaster.pid`` whose process is gone, a zombie, or not a PostgreSQL
serving ``D`` is stale: it is removed, and leftover children of a killed
server are given time to exit before the new start. A busy port is replaced
(and persisted) before ``pg_ctl start``, and once more if the server lost a
race for it. The cluster itself comes from :mod:`mango.embedded._creation`.
"""

from __future__ import annotations

import fcntl
import logging
import time
from pathlib import Path

import attrs

from mango.domain.errors import ProviderUnavailable
from mango.embedded._cluster import (
    HOST,
    Credentials,
    Postmaster,
    read_from,
    read_postmaster,
    run_tool,
    tail,
    write_credentials,
)
from mango.embedded._creation import Cluster
from mango.embedded._host import Account, free_port, is_server_of, port_is_free, processes_in

__all__ = ["launch", "ready_postmaster", "running_postmaster", "stop_if_last"]

_READY = ("ready", "standby")
_LOG = logging.getLogger("mango.embedded.postgres")


def running_postmaster(data_dir: Path) -> Postmaster | None:
    """The server serving ``data_dir`` now (ready or not), or None. Changes nothing."""
    postmaster = read_postmaster(data_dir)
    if postmaster is None or not is_server_of(postmaster.pid, data_dir):
        return None
    return postmaster


def ready_postmaster(cluster: Cluster) -> Postmaster | None:
    """The ready server on the cluster, or None after clearing a stale pid file.

    Waits (up to the cluster's timeout) for a server another process is
    starting or stopping.
    """
    data_dir = cluster.data_dir
    deadline = time.monotonic() + cluster.timeout
    while True:
        postmaster = read_postmaster(data_dir)
        if postmaster is None:
            return None
        if not is_server_of(postmaster.pid, data_dir):
            _LOG.warning(
                "removing stale %s/postmaster.pid (pid %d is not its server)",
                data_dir,
                postmaster.pid,
            )
            (data_dir / "postmaster.pid").unlink(missing_ok=True)
            _await_old_processes(data_dir, deadline)
            return None
        if postmaster.status in _READY and postmaster.port is not None:
            return postmaster
        if time.monotonic() >= deadline:
            raise ProviderUnavailable(
                f"PostgreSQL (pid {postmaster.pid}) on {data_dir} stayed "
                f"{postmaster.status or 'starting'!r} for {cluster.timeout:g} s",
                hint=f"see {cluster.log_path}",
            )
        time.sleep(0.05)  # a server another process is starting or stopping


def _await_old_processes(data_dir: Path, deadline: float) -> None:
    while pids := processes_in(data_dir):
        if time.monotonic() >= deadline:
            raise ProviderUnavailable(
                f"processes {pids} of a killed PostgreSQL still use {data_dir}",
                hint="terminate them, then retry",
            )
        time.sleep(0.02)


def launch(
    cluster: Cluster, bin_dir: Path, account: Account | None, credentials: Credentials
) -> int:
    """Start the server with ``pg_ctl start --wait``; return the port it listens on."""
    data_dir, log_path = cluster.data_dir, cluster.log_path
    port = credentials.port
    attempts = 3
    for attempt in range(1, attempts + 1):
        if not port_is_free(port, HOST):
            port = free_port(HOST)
        if port != credentials.port:
            credentials = attrs.evolve(credentials, port=port)
            write_credentials(cluster.credentials_path, credentials)
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        _LOG.info("starting PostgreSQL on %s:%d for %s", HOST, port, data_dir)
        argv = [
            *(str(bin_dir / "pg_ctl"), "start", "--wait"),
            *(f"--pgdata={data_dir}", f"--log={log_path}"),
            *(f"--timeout={max(1, round(cluster.timeout))}", f"--options=-p {port}"),
        ]
        code, output = run_tool(argv, account, timeout=cluster.timeout + 30)
        if code == 0:
            postmaster = read_postmaster(data_dir)
            return port if postmaster is None or postmaster.port is None else postmaster.port
        log = read_from(log_path, log_offset)
        if attempt < attempts and "could not bind" in log:
            port = free_port(HOST)  # lost a race for the port; take another
            continue
        raise ProviderUnavailable(
            f"PostgreSQL did not start on {data_dir}: {tail(log or output)}",
            hint=f"see {log_path}",
        )
    raise AssertionError("unreachable")  # pragma: no cover


def stop_if_last(cluster: Cluster, holder: int, bin_dir: Path, account: Account | None) -> bool:
    """Shut the server down if ``holder`` is the only handle left (start lock held).

    True if a running server was stopped.
    """
    data_dir = cluster.data_dir
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # another handle still uses the server
    postmaster = read_postmaster(data_dir)
    if postmaster is None or not is_server_of(postmaster.pid, data_dir):
        return False
    _LOG.info("stopping PostgreSQL (pid %d) on %s", postmaster.pid, data_dir)
    argv = [
        *(str(bin_dir / "pg_ctl"), "stop", "--wait", "--mode=fast"),
        *(f"--pgdata={data_dir}", f"--timeout={max(1, round(cluster.timeout))}"),
    ]
    code, output = run_tool(argv, account, timeout=cluster.timeout + 30)
    if code != 0 and is_server_of(postmaster.pid, data_dir):
        raise ProviderUnavailable(
            f"could not stop PostgreSQL (pid {postmaster.pid}) on {data_dir}: {tail(output)}",
            hint=f"see {cluster.log_path}",
        )
    return True
