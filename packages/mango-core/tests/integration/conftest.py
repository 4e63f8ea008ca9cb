"""Fixtures shared by the integration tests that run on several providers."""

from __future__ import annotations

import os

import pytest

from mango.domain import ProviderUnavailable

DOCKER_IMAGE = "mango-test-busybox:latest"
"""The locally imported test image (never pulled)."""


async def _docker_ready() -> bool:
    from mango_provider_docker import Engine

    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        await engine.health()
        return await engine.image_exists(DOCKER_IMAGE)
    except ProviderUnavailable:
        return False
    finally:
        await engine.aclose()


@pytest.fixture(params=["local", "docker"])
async def provider_name(request: pytest.FixtureRequest) -> str:
    """Each provider that runs here; docker only with a daemon and the test image."""
    name: str = request.param
    if name == "docker" and not await _docker_ready():
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail("no Docker Engine with the test image (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip("no Docker Engine with the test image")
    return name
