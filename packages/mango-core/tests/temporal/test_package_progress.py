"""Through Temporal, a client hears what a Session's package setup installs (Docker, real apt).

The worker's ``AcquireSandbox`` activity sends the latest progress line in
its heartbeat; the client watching the step prints it. The package's file
is held back by the test's server until the client has heard the install
line, so the step lasts exactly as long as the test needs, with no timing.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mango.domain import Command, MangoError, PackagePlan, SandboxSpec
from mango_provider_docker import DockerProvider, Engine
from mango_provider_docker.packageserver import PackageServer
from mango_provider_docker.testimages import (
    BASE_IMAGE,
    BASE_IMAGE_HINT,
    bridge_gateway,
    derived_image,
    served_sources,
)

from .support import Harness

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.docker, pytest.mark.slow]

PACKAGE = "mango-probe-slow"
INSTALL = f"installing apt packages: apt-get install -y --no-install-recommends {PACKAGE}"


async def _engine() -> Engine:
    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        await engine.client()
    except MangoError as exc:
        await engine.aclose()
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail(f"no Docker Engine: {exc} (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip(f"no Docker Engine: {exc}")
    return engine


async def test_the_temporal_path_reports_what_a_package_setup_installs(
    harness: Harness, tmp_path: Path
) -> None:
    """on_progress hears each install command while the worker runs it; the package works."""
    engine = await _engine()
    server: PackageServer | None = None
    provider: DockerProvider | None = None
    image = ""
    try:
        if not await engine.image_exists(BASE_IMAGE):
            pytest.fail(f"this test needs {BASE_IMAGE}: {BASE_IMAGE_HINT}")
        server = PackageServer.of(await bridge_gateway(engine), apt=[PACKAGE])
        await server.start()
        image = await derived_image(
            engine, served_sources(server.url, server.host), repo="mango-test-served"
        )
        _, release = server.hold(f"apt/{PACKAGE}_1.0_all.deb")
        provider = DockerProvider(
            tmp_path / "docker",
            image=image,
            namespace=harness.queue_prefix,
            host=os.environ.get("DOCKER_HOST", "").strip() or None,
            pull_missing_images=False,
        )
        orchestrator = harness.orchestrator_with(default_provider="docker")
        session = harness.sid("packages")
        heard: list[str] = []

        def progress(line: str) -> None:
            heard.append(line)
            if line == INSTALL:
                release.set()  # the client heard it while apt-get waited for the file

        spec = SandboxSpec(timeout=120, packages=PackagePlan(apt=[PACKAGE]))
        async with harness.run_worker(provider, harness.store):
            try:
                async with asyncio.timeout(180):
                    result = await orchestrator.exec(
                        session, Command((PACKAGE,)), spec, on_progress=progress
                    )
            except TimeoutError:
                pytest.fail(f"the install line never reached the client; it heard {heard}")
            finally:
                release.set()
                await orchestrator.delete_session(session)
        # The client polls once a second: a quick command (apt-get update) may pass unheard.
        assert INSTALL in heard
        assert result.stdout == f"{PACKAGE}\n".encode()
    finally:
        if provider is not None:
            await provider.aclose()
        if server is not None:
            await server.stop()
        if image:
            await engine.call(
                f"remove image {image}", "DELETE", f"images/{image}", expected={404, 409}
            )
        await engine.aclose()
