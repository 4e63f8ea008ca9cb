"""Fixtures: a fake E2B service per test (E2B or Cube mode) and providers pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.provider import SandboxSpec
from mango_provider_e2b import E2BProvider, E2BSandbox
from mango_provider_e2b.conformance import cube_fake_options, e2b_fake_options
from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig

NAMESPACE = "e2b-tests"
SPEC = SandboxSpec(timeout=30.0)


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A running fake in E2B mode (API key ``e2b_fake_key``)."""
    async with E2BFakeService.create(tmp_path / "fake", FakeConfig()) as service:
        yield service


@pytest.fixture
async def cube_fake(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A running fake in Cube mode (Bearer ``cube_fake_key``, domain ``cube.local``)."""
    config = FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local")
    async with E2BFakeService.create(tmp_path / "cube-fake", config) as service:
        yield service


_ENVD_ROUTES = ("/process.", "/filesystem.", "/files")


def control_calls(fake: E2BFakeService, since: int = 0) -> list[str]:
    """The control-plane requests the fake received (``METHOD route``), from ``since`` on."""
    log = fake.faults.log[since:]
    return [f"{r.method} {r.route}" for r in log if not r.route.startswith(_ENVD_ROUTES)]


def make_provider(service: E2BFakeService, **changes: object) -> E2BProvider:
    """A provider over ``service`` in its mode, with ``changes`` to its options."""
    import attrs

    build = cube_fake_options if service.config.mode == CUBE_MODE else e2b_fake_options
    options = attrs.evolve(build(service.url, service.config), **changes)  # type: ignore[arg-type]
    return E2BProvider(options, namespace=NAMESPACE)


@pytest.fixture
async def provider(fake: E2BFakeService) -> AsyncIterator[E2BProvider]:
    """An e2b provider over :func:`fake`; closed afterwards."""
    made = make_provider(fake)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def session_key() -> str:
    """A fresh Session key."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def sandbox(provider: E2BProvider, session_key: str) -> AsyncIterator[E2BSandbox]:
    """A created sandbox, destroyed afterwards."""
    made = await provider.create(session_key, SPEC)
    try:
        yield made
    finally:
        await made.destroy()
