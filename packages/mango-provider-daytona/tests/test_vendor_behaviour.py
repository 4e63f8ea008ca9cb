"""Where Daytona behaves otherwise than the fake did, the fake now does as Daytona does.

Each test names the daytonaio/daytona fact it reproduces (issue 20).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.fakes import FakeService
from mango.provider import Command, FileTooLarge, ProviderUnavailable, SandboxSpec
from mango_provider_daytona import DaytonaProvider, DaytonaSandbox
from mango_provider_daytona.fake import DaytonaFake, open_fake_daytona
from mango_provider_daytona.files import file_part

from .conftest import make_provider

SPEC = SandboxSpec(timeout=60.0)
EXECUTE = "/toolbox/{id}/process/execute"
GUARD_SECONDS = 20.0
"""A liveness bound: what is awaited must end by itself long before it (never a timing)."""


async def test_a_cut_command_is_killed_not_left_running(
    service: FakeService, fake: DaytonaFake, sandbox: DaytonaSandbox
) -> None:
    """The daemon runs a command detached from its request: a reset leaves it running, so the
    client kills its tree before it reports the failure (a retry never runs it twice)."""
    record = service.sandboxes.get(sandbox.ref.external_id)
    async with record.beacon("started") as started:
        task = asyncio.ensure_future(
            sandbox.exec(Command(("sh", "-c", "echo up > started; sleep 300"), timeout=120))
        )
        await started.wait(GUARD_SECONDS)
    assert service.faults.cut_in_flight(method="POST", path=EXECUTE) == 1
    with pytest.raises(ProviderUnavailable):
        await asyncio.wait_for(task, GUARD_SECONDS)
    first = fake.executions[0]
    # Before the fix the command ran on, unseen, for its 300 s: the wrapper ends only
    # once its command is gone, and reports no exit status for a killed one.
    result = await asyncio.wait_for(asyncio.shield(first), GUARD_SECONDS)
    assert not result.cancelled
    assert b" -1\n" in result.stdout
    assert (await sandbox.exec(Command(("printf", "after")))).stdout == b"after"


@pytest.fixture
async def legacy_daytona(tmp_path: Path) -> AsyncIterator[tuple[FakeService, DaytonaProvider]]:
    """A fake whose daemon predates typed download errors (no Content-Length, text errors)."""
    async with open_fake_daytona(tmp_path / "legacy") as (service, fake):
        fake.legacy_daemon = True
        provider = make_provider(service)
        try:
            yield service, provider
        finally:
            await provider.aclose()


async def test_an_older_daemons_download_is_read_and_bounded(
    legacy_daytona: tuple[FakeService, DaytonaProvider], session_key: str
) -> None:
    """No Content-Length on the file part: the bound is checked while the body is read."""
    _service, provider = legacy_daytona
    sandbox = await provider.create(session_key, SPEC)
    try:
        await sandbox.write_file("data.bin", b"x" * 5000)
        assert await sandbox.read_file("data.bin") == b"x" * 5000
        with pytest.raises(FileTooLarge):
            await sandbox.read_file("data.bin", max_bytes=100)
        async with sandbox.open_file("data.bin") as chunks:
            assert b"".join([chunk async for chunk in chunks]) == b"x" * 5000
    finally:
        await sandbox.destroy()


async def test_an_older_daemons_text_error_part_is_file_not_found(
    legacy_daytona: tuple[FakeService, DaytonaProvider], session_key: str
) -> None:
    """``file not found or invalid: PATH`` as a text part is FileNotFoundError, not an outage."""
    _service, provider = legacy_daytona
    sandbox = await provider.create(session_key, SPEC)
    try:
        async with sandbox._toolbox.download(f"{sandbox.root}/vanished.txt") as response:
            with pytest.raises(FileNotFoundError):
                async with file_part(response, "vanished.txt"):
                    pass  # pragma: no cover - never reached
    finally:
        await sandbox.destroy()
