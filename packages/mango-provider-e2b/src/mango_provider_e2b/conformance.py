"""Offline conformance targets: a provider over the fake E2B service (E2B or Cube mode).

A target's ``open(scratch_dir)`` must yield a *fresh* provider on every entry
that sees what earlier entries made (a simulated worker restart). The fake
service is the shared deployment: the first entry for a scratch directory
starts one, later entries reuse it, and the last exit stops it (deleting its
sandboxes and killing their processes). The namespace is derived from the
scratch directory, so every entry is the same deployment. The E2B target's
testbed names a free host port for the ``exposed-ports`` check (the fake's
sandboxes are host processes; its client-proxy routing sends a port's
requests to ``127.0.0.1:{port}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from mango.provider import ConformanceTestbed, PortTestbed
from mango.provider.ownership import derived_namespace
from mango_provider_e2b.control import CUBE, E2B
from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig
from mango_provider_e2b.options import EnvdOptions
from mango_provider_e2b.provider import E2BProvider

__all__ = [
    "CONFORMANCE_IDLE_TIMEOUT",
    "FakeDeployment",
    "cube_fake_options",
    "e2b_fake_options",
    "free_port",
    "open_cube_conformance_provider",
    "open_e2b_conformance_provider",
    "open_e2b_conformance_testbed",
    "shared_fake",
]

CONFORMANCE_IDLE_TIMEOUT = 600.0
"""The idle timeout of conformance sandboxes: none pauses while the suite runs."""


def e2b_fake_options(url: str, config: FakeConfig) -> EnvdOptions:
    """E2B options pointing at a fake: the API and one shared envd URL (header routing)."""
    return EnvdOptions(
        dialect=E2B,
        api_url=url,
        api_key=config.api_key,
        template="base",
        domain=config.domain,
        envd_scheme="http",
        shared_envd_url=url,
        idle_timeout=CONFORMANCE_IDLE_TIMEOUT,
    )


def cube_fake_options(url: str, config: FakeConfig) -> EnvdOptions:
    """Cube options pointing at a fake: Bearer auth, proxy-node routing, virtual hosts."""
    address = urlsplit(url)
    return EnvdOptions(
        dialect=CUBE,
        api_url=url,
        api_key=config.api_key,
        template="base",
        domain="cube.app",  # the fake names its own domain in every answer
        envd_scheme="http",
        proxy_host=address.hostname,
        proxy_port=address.port or 80,
        idle_timeout=CONFORMANCE_IDLE_TIMEOUT,
    )


@attrs.define(eq=False)
class FakeDeployment:
    """One running fake shared by the entries of one scratch directory."""

    service: E2BFakeService
    users: int = 0


_DEPLOYMENTS: dict[tuple[int, str], FakeDeployment] = {}


@contextlib.asynccontextmanager
async def shared_fake(scratch_dir: Path, config: FakeConfig) -> AsyncIterator[E2BFakeService]:
    """The fake of ``scratch_dir`` on this loop: the first user starts it, the last stops it."""
    key = (id(asyncio.get_running_loop()), os.fspath(scratch_dir))
    deployment = _DEPLOYMENTS.get(key)
    if deployment is None:
        service = E2BFakeService.create(Path(scratch_dir) / "e2b-fake", config, name=config.mode)
        deployment = _DEPLOYMENTS[key] = FakeDeployment(service)
        try:
            await service.start()
        except BaseException:
            del _DEPLOYMENTS[key]
            raise
    deployment.users += 1
    try:
        yield deployment.service
    finally:
        deployment.users -= 1
        if deployment.users == 0:
            _DEPLOYMENTS.pop(key, None)
            await deployment.service.stop()


def _opener(
    config: FakeConfig, options: Callable[[str, FakeConfig], EnvdOptions]
) -> Callable[[Path], contextlib.AbstractAsyncContextManager[E2BProvider]]:
    @contextlib.asynccontextmanager
    async def open_provider(scratch_dir: Path) -> AsyncIterator[E2BProvider]:
        async with shared_fake(scratch_dir, config) as service:
            provider = E2BProvider(
                options(service.url, config),
                namespace=derived_namespace("conformance", os.fspath(scratch_dir)),
            )
            try:
                yield provider
            finally:
                await provider.aclose()

    return open_provider


open_e2b_conformance_provider = _opener(FakeConfig(), e2b_fake_options)
"""Yield a fresh ``e2b`` provider over the fake E2B service of ``scratch_dir``."""

open_cube_conformance_provider = _opener(
    FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local"), cube_fake_options
)
"""Yield a fresh ``cube`` provider over the fake service of ``scratch_dir`` in Cube mode."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def open_e2b_conformance_testbed(_scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    """A free host port for the ``exposed-ports`` check (nothing else is offered)."""
    yield ConformanceTestbed(ports=PortTestbed(port=free_port()))
