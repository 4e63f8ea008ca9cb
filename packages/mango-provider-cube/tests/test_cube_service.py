"""Cube as CubeAPI and CubeMaster behave (TencentCloud/CubeSandbox sources), not as E2B does.

CubeAPI's ``NewSandbox`` reads ``allow_internet_access`` only (snake case) and
passes on ``timeout`` (CubeMaster's create deadline), the network and the
metadata; CubeMaster keeps no lifetime (``/timeout`` is a route it lacks: HTTP
500); CubeAPI reports ``envdVersion: "0.2.0"`` for every sandbox; its list
covers the first ``limit`` nodes and has no paging.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from mango.provider import Command, NetworkMode, SandboxSpec
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.conformance import cube_fake_options
from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig

CONFIG = FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local", cube_nodes=200)
SPEC = SandboxSpec(timeout=30)
NEW_SANDBOX_FIELDS = frozenset(
    {
        "templateID",
        "timeout",
        "autoPause",
        "autoResume",
        "secure",
        "allow_internet_access",
        "network",
        "metadata",
        "envVars",
        "mcp",
        "volumeMounts",
    }
)
"""Every field CubeAPI's NewSandbox parses (CubeAPI/src/models/mod.rs); others are ignored."""
ACTED_ON = frozenset({"templateID", "timeout", "allow_internet_access", "network", "metadata"})
"""Of those, what create_sandbox passes on to CubeMaster (services/sandboxes.rs)."""


@pytest.fixture
async def cube(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A fake in Cube mode spreading its sandboxes over 200 nodes."""
    async with E2BFakeService.create(tmp_path / "cube", CONFIG) as service:
        yield service


def provider_of(service: E2BFakeService, **changes: object) -> E2BProvider:
    """A cube provider over ``service``."""
    options = attrs.evolve(cube_fake_options(service.url, CONFIG), **changes)  # type: ignore[arg-type]
    return E2BProvider(options, namespace="cube-service")


def key() -> str:
    """A fresh Session key."""
    return f"k-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(
    ("network", "internet"), [(NetworkMode.NONE, False), (NetworkMode.BRIDGE, True)]
)
async def test_network_none_reaches_cube_as_no_internet(
    cube: E2BFakeService, network: NetworkMode, internet: bool
) -> None:
    """network=none is sent as allow_internet_access: false, the only spelling CubeAPI reads."""
    provider = provider_of(cube)
    try:
        sandbox = await provider.create(key(), SandboxSpec(timeout=30, network=network))
        record = cube.sandboxes.get(sandbox.ref.external_id)
        assert record.extra["internet"] is internet
        assert record.extra["request"]["allow_internet_access"] is internet
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_the_create_body_holds_only_what_cube_acts_on(cube: E2BFakeService) -> None:
    """No field CubeAPI ignores (autoPauseMemory, lifecycle) or parses and drops (autoPause)."""
    provider = provider_of(cube)
    try:
        sandbox = await provider.create(key(), SPEC)
        body = cube.sandboxes.get(sandbox.ref.external_id).extra["request"]
        assert ACTED_ON <= NEW_SANDBOX_FIELDS
        assert set(body) <= ACTED_ON, sorted(set(body) - ACTED_ON)
        assert body["timeout"] == 30  # CubeMaster's create deadline: as long as mango waits
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_commands_run_without_a_lifetime_to_extend(cube: E2BFakeService) -> None:
    """CubeMaster has no TTL (its /timeout route is missing): exec never calls it."""
    provider = provider_of(cube, idle_timeout=1.0)
    try:
        sandbox = await provider.create(key(), SPEC)
        for _ in range(2):
            result = await sandbox.exec(Command(("printf", "ok")))
            assert (result.exit_code, result.stdout) == (0, b"ok")
        assert cube.faults.count("POST", "/sandboxes/{id}/timeout") == 0
        assert cube.state(sandbox.ref.external_id) == "running"  # nothing paused it
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_large_stdin_works_although_cube_reports_envd_0_2_0(cube: E2BFakeService) -> None:
    """CubeAPI reports envd 0.2.0 always; Cube's envd (0.5.13) closes stdin: 1 MiB goes through."""
    provider = provider_of(cube)
    try:
        sandbox = await provider.create(key(), SPEC)
        assert sandbox._info.envd_version == "0.2.0"
        data = bytes(range(256)) * 4096
        result = await sandbox.exec(Command(("wc", "-c"), stdin=data))
        assert result.exit_code == 0
        assert result.stdout.strip() == str(len(data)).encode()
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_list_owned_sees_a_sandbox_past_the_hundredth_node(cube: E2BFakeService) -> None:
    """CubeAPI lists the first `limit` nodes and cannot page: mango asks for all of them."""
    provider = provider_of(cube)
    try:
        sandbox = await provider.create(key(), SPEC)
        cube.place(sandbox.ref.external_id, 150)
        owned = await provider.list_owned()
        assert [resource.ref for resource in owned] == [sandbox.ref]
        await sandbox.destroy()
    finally:
        await provider.aclose()
