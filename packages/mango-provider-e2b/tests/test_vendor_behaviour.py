"""Where E2B's service behaves otherwise than the fake did, the fake now does as E2B does.

Each test names the e2b-dev/infra or SDK fact it reproduces (issue 20).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mango.provider import Command, ProviderContext, SandboxNotFound
from mango_provider_e2b import E2BSandbox
from mango_provider_e2b.fake import E2BFakeService, FakeConfig
from mango_provider_e2b.settings import read_e2b_options

from .conftest import SPEC, make_provider

GUARD_SECONDS = 20.0
"""A liveness bound: the awaited call must end by itself long before it (never a timing)."""


async def test_an_idle_pause_keeps_memory_by_default(
    fake: E2BFakeService, session_key: str
) -> None:
    """autoPauseMemory is true (E2B's full snapshot): an auto-paused sandbox resumes warm."""
    provider = make_provider(fake, idle_timeout=1.0)
    try:
        sandbox = await provider.create(session_key, SPEC)
        sandbox_id = sandbox.ref.external_id
        assert fake.sandboxes.get(sandbox_id).extra["request"]["autoPauseMemory"] is True
        assert await fake.wait_for_state(sandbox_id, "paused", timeout=GUARD_SECONDS)
        await sandbox.keep_alive()
        assert fake.cold_boots(sandbox_id) == 0
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_filesystem_pause_mode_is_sent_and_cold_boots(
    fake: E2BFakeService, session_key: str
) -> None:
    """E2B_AUTO_PAUSE_MODE=filesystem asks for a filesystem-only snapshot: the disk survives."""
    options = read_e2b_options({"E2B_API_KEY": "e2b_fake_key", "E2B_AUTO_PAUSE_MODE": "filesystem"})
    assert options.pause_memory is False
    provider = make_provider(fake, idle_timeout=1.0, pause_memory=False)
    try:
        sandbox = await provider.create(session_key, SPEC)
        sandbox_id = sandbox.ref.external_id
        await sandbox.write_file("kept.txt", b"disk")
        assert fake.sandboxes.get(sandbox_id).extra["request"]["autoPauseMemory"] is False
        assert await fake.wait_for_state(sandbox_id, "paused", timeout=GUARD_SECONDS)
        await sandbox.keep_alive()
        assert fake.cold_boots(sandbox_id) == 1
        assert await sandbox.read_file("kept.txt") == b"disk"
        await sandbox.destroy()
    finally:
        await provider.aclose()


def test_an_unknown_pause_mode_is_refused() -> None:
    """The setting takes full or filesystem only."""
    from mango.provider import ConfigurationError
    from mango_provider_e2b.settings import open_e2b_provider

    with pytest.raises(ConfigurationError, match="E2B_AUTO_PAUSE_MODE"):
        open_e2b_provider(
            ProviderContext(
                namespace="n", environ={"E2B_API_KEY": "k", "E2B_AUTO_PAUSE_MODE": "memory"}
            )
        )


async def test_writes_reach_an_envd_older_than_0_5_7_as_multipart(
    tmp_path: Path, session_key: str
) -> None:
    """envd before 0.5.7 reads multipart only (it answers a raw body with HTTP 500)."""
    async with E2BFakeService.create(tmp_path / "old", FakeConfig(envd_version="0.5.6")) as old:
        provider = make_provider(old)
        try:
            sandbox = await provider.create(session_key, SPEC)
            await sandbox.write_file("nested/old-envd.bin", b"\x00multipart\n")
            assert await sandbox.read_file("nested/old-envd.bin") == b"\x00multipart\n"
            await sandbox.destroy()
        finally:
            await provider.aclose()


async def test_a_paused_sandbox_is_resumed_not_lost_when_its_timeout_is_extended(
    fake: E2BFakeService, session_key: str
) -> None:
    """/timeout answers 404 for a paused sandbox (infra's KeepAliveFor): a GET tells, it resumes."""
    provider = make_provider(fake, idle_timeout=1.0)
    try:
        sandbox = await provider.create(session_key, SPEC)
        sandbox_id = sandbox.ref.external_id
        assert await fake.wait_for_state(sandbox_id, "paused", timeout=GUARD_SECONDS)
        result = await sandbox.exec(Command(("printf", "awake")))
        assert (result.exit_code, result.stdout) == (0, b"awake")
        assert fake.state(sandbox_id) == "running"
        assert fake.faults.count("POST", "/sandboxes/{id}/timeout") >= 1
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_a_gone_sandbox_is_lost_only_once_a_get_confirms_it(
    fake: E2BFakeService, session_key: str
) -> None:
    """/timeout's 404 for a deleted sandbox: the GET's 404 confirms it, then SandboxNotFound."""
    provider = make_provider(fake, idle_timeout=1.0)
    try:
        sandbox = await provider.create(session_key, SPEC)
        await fake.delete_sandbox(sandbox.ref.external_id)
        gets = fake.faults.count("GET", "/sandboxes/{id}")
        with pytest.raises(SandboxNotFound):
            await sandbox.exec(Command(("true",)))
        assert fake.faults.count("GET", "/sandboxes/{id}") > gets
    finally:
        await provider.aclose()


async def test_exec_returns_at_once_after_its_own_destroy_when_the_stream_hangs(
    tmp_path: Path, session_key: str
) -> None:
    """A killed VM's stream may never be reset: this client's destroy ends its exec anyway."""
    config = FakeConfig(kill_resets_streams=False)
    async with E2BFakeService.create(tmp_path / "hang", config) as hanging:
        provider = make_provider(hanging)
        try:
            sandbox: E2BSandbox = await provider.create(session_key, SPEC)
            sandbox_id = sandbox.ref.external_id
            task = asyncio.ensure_future(sandbox.exec(Command(("sleep", "300"), timeout=120)))
            assert await hanging.wait_until(
                lambda: bool(hanging.processes(sandbox_id)), timeout=GUARD_SECONDS
            )
            await sandbox.destroy()
            result = await asyncio.wait_for(task, GUARD_SECONDS)
            assert (result.cancelled, result.exit_code) == (True, -1)
        finally:
            await provider.aclose()


async def test_the_file_api_is_refused_on_an_envd_whose_stat_follows_links(
    tmp_path: Path, session_key: str
) -> None:
    """envd before 0.2.6 (e2b-dev/infra#924) follows links in Stat: the file API says so."""
    from mango.provider import ConfigurationError

    async with E2BFakeService.create(tmp_path / "old", FakeConfig(envd_version="0.2.5")) as old:
        provider = make_provider(old)
        try:
            sandbox = await provider.create(session_key, SPEC)
            for call in (sandbox.list_dir(""), sandbox.stat("x"), sandbox.make_dir("d")):
                with pytest.raises(ConfigurationError, match=r"envd \(0\.2\.5\)"):
                    await call
            await sandbox.destroy()
        finally:
            await provider.aclose()
