"""The embedded Temporal dev server: start, join, persist the port, stale records, stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from mango.embedded._host import is_process_alive
from mango.embedded.temporal import EmbeddedTemporal, embedded_temporal, running_address
from mango.temporal import connect

from .support import wait_until

pytestmark = pytest.mark.temporal


def record(state_dir: Path) -> dict[str, int]:
    """The server.json of ``state_dir``."""
    raw: dict[str, int] = json.loads((state_dir / "temporal" / "server.json").read_text())
    return raw


async def test_start_join_persist_and_stop(tmp_path: Path) -> None:
    """One server per state dir: joined by a second handle, stopped by the last, port reused."""
    async with embedded_temporal(tmp_path) as address:
        pid = record(tmp_path)["pid"]
        assert address == running_address(tmp_path)
        client = await connect(address)
        assert (await client.service_client.check_health()) is True
        async with embedded_temporal(tmp_path) as joined:
            assert joined == address
            assert record(tmp_path)["pid"] == pid
        assert is_process_alive(pid), "the first handle still uses it"
    assert not is_process_alive(pid)
    assert running_address(tmp_path) is None
    port = (tmp_path / "temporal" / "port").read_text().strip()
    assert address.endswith(f":{port}")
    async with embedded_temporal(tmp_path) as again:
        assert again == address  # the persisted port is reused
        assert record(tmp_path)["pid"] != pid


async def test_concurrent_starts_make_one_server(tmp_path: Path) -> None:
    """The start lock lets only one of two racing handles launch a server."""
    first, second = EmbeddedTemporal(tmp_path), EmbeddedTemporal(tmp_path)
    addresses = await asyncio.gather(first.start(), second.start())
    try:
        assert addresses[0] == addresses[1]
        pid = record(tmp_path)["pid"]
    finally:
        await first.stop()
        await second.stop()
    assert not is_process_alive(pid)


async def test_stale_records_are_replaced(tmp_path: Path) -> None:
    """A record naming a dead process, or a live non-Temporal one, does not block a start."""
    directory = tmp_path / "temporal"
    directory.mkdir()
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    for stale_pid in (dead.pid, os.getpid()):
        (directory / "server.json").write_text(json.dumps({"pid": stale_pid, "port": 1}))
        assert running_address(tmp_path) is None
        async with embedded_temporal(tmp_path) as address:
            assert record(tmp_path)["pid"] not in (dead.pid, os.getpid())
            assert address == running_address(tmp_path)


async def test_a_kept_alive_server_comes_back_after_a_kill(tmp_path: Path) -> None:
    """SIGKILL of the server under a worker's handle: a new one on the same address and
    database, and a client connected before answers again (it would poll a dead one)."""
    async with embedded_temporal(tmp_path, keep_alive=True) as address:
        pid = record(tmp_path)["pid"]
        client = await connect(address)
        assert (await client.service_client.check_health()) is True
        os.kill(pid, signal.SIGKILL)

        async def back() -> bool:
            current = record(tmp_path)["pid"] if running_address(tmp_path) else pid
            if current == pid:
                return False
            try:
                return bool(await client.service_client.check_health())
            except Exception:  # noqa: BLE001 - still starting
                return False

        await wait_until(back, 90, "the server to come back")
        assert running_address(tmp_path) == address
        new_pid = record(tmp_path)["pid"]
    assert not is_process_alive(new_pid)
    assert running_address(tmp_path) is None
