"""Fixtures for the Daytona provider's tests: a fake Daytona on 127.0.0.1 per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from mango.fakes import FakeService
from mango.provider import SandboxSpec
from mango_provider_daytona import DaytonaProvider, DaytonaSandbox
from mango_provider_daytona.fake import FAKE_API_KEY, DaytonaFake, open_fake_daytona

NAMESPACE = f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def daytona(tmp_path: Path) -> AsyncIterator[tuple[FakeService, DaytonaFake]]:
    """A running fake Daytona (service, state)."""
    async with open_fake_daytona(tmp_path / "fake") as served:
        yield served


@pytest.fixture
def service(daytona: tuple[FakeService, DaytonaFake]) -> FakeService:
    """The fake's service (URL, faults, sandboxes)."""
    return daytona[0]


@pytest.fixture
def fake(daytona: tuple[FakeService, DaytonaFake]) -> DaytonaFake:
    """The fake's Daytona state (test hooks)."""
    return daytona[1]


def make_provider(service: FakeService, **options: object) -> DaytonaProvider:
    """A provider on the fake, in this run's namespace unless ``namespace`` is given."""
    options.setdefault("namespace", NAMESPACE)
    options.setdefault("poll_interval", 0.02)
    return DaytonaProvider(service.url, FAKE_API_KEY, **options)  # type: ignore[arg-type]


@pytest.fixture
async def provider(service: FakeService) -> AsyncIterator[DaytonaProvider]:
    """A provider on the fake; closed afterwards."""
    made = make_provider(service)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def session_key(request: pytest.FixtureRequest) -> str:
    """A Session key unique to this test."""
    return f"test-{request.node.name[:60]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def sandbox(provider: DaytonaProvider, session_key: str) -> AsyncIterator[DaytonaSandbox]:
    """A created sandbox, destroyed afterwards."""
    made = await provider.create(session_key, SandboxSpec(timeout=60.0))
    try:
        yield made
    finally:
        await made.destroy()


@pytest.fixture
async def open_provider(service: FakeService) -> AsyncIterator[Callable[..., DaytonaProvider]]:
    """Make more providers on the fake (fresh workers); all are closed afterwards."""
    made: list[DaytonaProvider] = []

    def factory(**options: object) -> DaytonaProvider:
        provider = make_provider(service, **options)
        made.append(provider)
        return provider

    try:
        yield factory
    finally:
        for provider in made:
            await provider.aclose()
