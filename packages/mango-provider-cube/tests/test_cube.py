"""Cube specifics: settings, Bearer auth, proxy-node routing with the sandbox's virtual host."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from mango.provider import Command, ConfigurationError, ProviderContext, SandboxSpec
from mango_provider_cube import open_cube_provider, read_cube_options
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.conformance import cube_fake_options
from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig

CONFIG = FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local")


@pytest.fixture
async def cube_fake(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A fake in Cube mode."""
    async with E2BFakeService.create(tmp_path / "cube", CONFIG) as service:
        yield service


def test_required_settings_are_checked_at_open() -> None:
    """CUBE_API_URL and CUBE_TEMPLATE_ID are required; bad ports and schemes are refused."""
    with pytest.raises(ConfigurationError, match="CUBE_API_URL and CUBE_TEMPLATE_ID"):
        open_cube_provider(ProviderContext(namespace="n", environ={}))
    base = {"CUBE_API_URL": "http://10.0.0.2:3000", "CUBE_TEMPLATE_ID": "tpl"}
    with pytest.raises(ConfigurationError, match="CUBE_PROXY_PORT_HTTP"):
        read_cube_options({**base, "CUBE_PROXY_PORT_HTTP": "http"})
    options = read_cube_options(
        {
            **base,
            "CUBE_API_KEY": "cube-secret-1",
            "CUBE_PROXY_NODE_IP": "10.0.0.5",
            "CUBE_PROXY_PORT_HTTP": "443",
            "CUBE_PROXY_SCHEME": "weird",
        }
    )
    assert (options.proxy_host, options.proxy_port, options.envd_scheme) == (
        "10.0.0.5",
        443,
        "https",
    )
    assert options.domain == "cube.app"
    assert options.dialect.auth_headers(options.api_key) == {
        "Authorization": "Bearer cube-secret-1"
    }
    assert "cube-secret-1" not in repr(options)


async def test_proxy_routing_keeps_the_virtual_host(cube_fake: E2BFakeService) -> None:
    """Data-plane requests dial the proxy node while Host names 49983-<id>.<domain>."""
    provider = E2BProvider(cube_fake_options(cube_fake.url, CONFIG), namespace="cube-tests")
    try:
        sandbox = await provider.create(f"k-{uuid.uuid4().hex[:8]}", SandboxSpec(timeout=30))
        # The virtual host is the only routing the fake gets: no E2b-Sandbox-Id header.
        address = sandbox._envd.address
        assert address.url == f"http://49983-{sandbox.ref.external_id}.cube.local"
        assert "E2b-Sandbox-Id" not in address.headers
        assert address.headers["X-API-Key"] == CONFIG.api_key
        await sandbox.write_file("via-proxy.txt", b"routed")
        result = await sandbox.exec(Command(("cat", "via-proxy.txt")))
        assert result.stdout == b"routed"
        seen = [record.path for record in cube_fake.faults.log]
        assert "/process.Process/Start" in seen
        await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_wrong_key_and_missing_bearer_are_configuration_errors(
    cube_fake: E2BFakeService,
) -> None:
    """CubeAPI refusing the key is a ConfigurationError that does not echo it."""
    options = attrs.evolve(cube_fake_options(cube_fake.url, CONFIG), api_key="wrong-cube-key")
    provider = E2BProvider(options, namespace="cube-tests")
    try:
        with pytest.raises(ConfigurationError) as caught:
            await provider.health()
        assert "wrong-cube-key" not in str(caught.value)
    finally:
        await provider.aclose()
