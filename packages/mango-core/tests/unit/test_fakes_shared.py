"""What the scaffold shares between vendor fakes: beacons, live records, wire rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from mango.fakes import FakeService, is_string_map, open_beacon, rfc3339
from mango.provider import Command

RUNNING = Command(("sh", "-c", "echo up > started; exec sleep 60"))


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[FakeService]:
    """A scaffold service with no vendor routes (the tests drive its registry)."""
    async with FakeService(tmp_path, lambda _service: []) as served:
        yield served


async def test_a_beacon_wakes_the_test_once_the_command_runs(service: FakeService) -> None:
    """The command's write to the beacon ends the wait; the command is then running."""
    record = await service.sandboxes.create()
    async with record.beacon("started") as started:
        running = asyncio.ensure_future(service.sandboxes.exec(record.id, RUNNING))
        assert await started.wait(30) == b"up\n"
        assert not running.done()
        assert await service.sandboxes.delete(record.id)
        result = await asyncio.wait_for(running, 30)
    assert (result.cancelled, result.exit_code) == (True, -1)


async def test_a_beacon_nothing_reaches_fails_naming_it(tmp_path: Path) -> None:
    """No command writes: the wait raises TimeoutError with the beacon's name."""
    async with open_beacon(tmp_path, "never") as never:
        with pytest.raises(TimeoutError, match="'never'"):
            await never.wait(0.05)


async def test_a_beacon_needs_a_free_name(tmp_path: Path) -> None:
    """A name already taken in the directory is refused, not reused."""
    (tmp_path / "taken").write_bytes(b"")
    with pytest.raises(FileExistsError):
        async with open_beacon(tmp_path, "taken"):
            pass


async def test_live_is_the_running_or_paused_record(service: FakeService) -> None:
    """live() answers a running or paused sandbox, and None once deleted or never made."""
    record = await service.sandboxes.create()
    assert service.sandboxes.live(record.id) is record
    service.sandboxes.pause(record.id)
    assert service.sandboxes.live(record.id) is record
    await service.sandboxes.delete(record.id)
    assert service.sandboxes.live(record.id) is None
    assert service.sandboxes.find(record.id) is record
    assert service.sandboxes.live("sbx-never") is None


def test_rfc3339_is_utc_with_a_z() -> None:
    """Any aware time is written in UTC with a Z, as the vendors' Go services do."""
    moment = datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    assert rfc3339(moment) == "2025-01-02T03:04:05.600000Z"
    assert rfc3339(moment.astimezone(timezone(timedelta(hours=2)))) == rfc3339(moment)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, True),
        ({"a": "b", "c": ""}, True),
        ({"a": 1}, False),
        ({"a": None}, False),
        (["a", "b"], False),
        ("a=b", False),
        (None, False),
    ],
)
def test_is_string_map(value: object, expected: bool) -> None:
    """Labels and metadata are JSON objects of strings to strings, nothing else."""
    assert is_string_map(value) is expected
