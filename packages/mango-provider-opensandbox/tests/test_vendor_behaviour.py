"""Where the OpenSandbox server behaves otherwise than the fake did, the fake now does as it does.

Each test names the alibaba/OpenSandbox fact it reproduces (issue 20).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from mango.provider import Command, ConfigurationError, NetworkMode, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.fake.server import UNPULLABLE_PREFIX

from .conftest import FAST_RETRY

SPEC = SandboxSpec(timeout=60)


async def test_an_image_that_cannot_be_pulled_is_a_configuration_error(
    make_provider: Callable[..., OpenSandboxProvider], fake: FakeOpenSandbox
) -> None:
    """HTTP 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED is classified by its code: no retry fixes it."""
    provider = make_provider()
    spec = SandboxSpec(timeout=60, image=f"{UNPULLABLE_PREFIX}python:3.12-slim")
    with pytest.raises(ConfigurationError, match="cannot pull the image") as caught:
        await provider.create("pull-key", spec)
    assert caught.value.permanent
    assert caught.value.hint is not None
    assert "OPEN_SANDBOX_IMAGE" in caught.value.hint
    assert fake.faults.count("POST", "/v1/sandboxes") == 1


@pytest.fixture
async def no_egress(tmp_path: Path) -> AsyncIterator[FakeOpenSandbox]:
    """A server configured without an egress sidecar image."""
    async with FakeOpenSandbox(tmp_path / "no-egress", egress_image=False) as server:
        yield server


async def test_network_none_without_an_egress_image_says_what_to_configure(
    no_egress: FakeOpenSandbox,
) -> None:
    """network=none needs the sidecar (a deny-all networkPolicy): the 400 gets a hint."""
    provider = OpenSandboxProvider(no_egress.url, api_key=no_egress.api_key, retry=FAST_RETRY)
    try:
        with pytest.raises(ConfigurationError, match=r"egress\.image") as caught:
            await provider.create("none-key", SPEC)
        assert caught.value.hint is not None
        assert "network=bridge" in caught.value.hint
        bridged = await provider.create(
            "bridge-key", SandboxSpec(timeout=60, network=NetworkMode.BRIDGE)
        )
        assert (await bridged.exec(Command(("printf", "open")))).stdout == b"open"
        await bridged.destroy()
    finally:
        await provider.aclose()


async def test_create_waits_for_execd_after_running(tmp_path: Path) -> None:
    """Running means the container runs; execd may not listen yet (the SDK pings first)."""
    async with FakeOpenSandbox(tmp_path / "booting", execd_boot_requests=12) as booting:
        provider = OpenSandboxProvider(booting.url, api_key=booting.api_key, retry=FAST_RETRY)
        try:
            sandbox = await provider.create("boot-key", SPEC)
            assert (await sandbox.exec(Command(("printf", "ready")))).stdout == b"ready"
            await sandbox.destroy()
        finally:
            await provider.aclose()
