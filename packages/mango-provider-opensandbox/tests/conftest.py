"""Fixtures: a fake OpenSandbox server per test, and providers on it in either data-path mode."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from mango.provider.http import RetryPolicy
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox

FAST_RETRY = RetryPolicy(attempts=3, timeout=5.0, wait_initial=0.01, wait_max=0.05, wait_jitter=0)
"""Retries that end quickly, for fault tests."""


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[FakeOpenSandbox]:
    """A running fake with a short execd grace period (the real server keeps 1 s)."""
    async with FakeOpenSandbox(tmp_path / "fake", grace_seconds=0.2) as server:
        yield server


@pytest.fixture
def namespace() -> str:
    """A fresh deployment namespace per test."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=[True, False], ids=["server-proxy", "direct"])
def server_proxy(request: pytest.FixtureRequest) -> bool:
    """Both data paths: through the server's proxy, and the direct endpoints."""
    return bool(request.param)


@pytest.fixture
async def make_provider(
    fake: FakeOpenSandbox, namespace: str, server_proxy: bool
) -> AsyncIterator[Callable[..., OpenSandboxProvider]]:
    """Build providers on the fake (each one a fresh worker); all closed at the end."""
    made: list[OpenSandboxProvider] = []

    def make(**options: object) -> OpenSandboxProvider:
        settings: dict[str, object] = {
            "api_key": fake.api_key,
            "namespace": namespace,
            "server_proxy": server_proxy,
            "retry": FAST_RETRY,
        }
        settings.update(options)
        provider = OpenSandboxProvider(fake.url, **settings)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()
