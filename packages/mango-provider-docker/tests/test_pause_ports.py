"""Pause, resume and exposed ports against the real daemon (Engine pause, 127.0.0.1 bindings)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest

from mango.domain.errors import InvalidInput, OwnershipError, PermanentError
from mango.domain.values import Command, NetworkMode, SandboxSpec
from mango_provider_docker import DockerSandbox, Engine

from .conftest import make_provider
from .helpers import eventually, sh, wait_for_file

pytestmark = pytest.mark.docker

PORT = 8080


async def client_get(url: str) -> str:
    """The body of ``url``/index.html."""
    async with httpx.AsyncClient(timeout=5) as client:
        return (await client.get(url + "/index.html")).text


async def test_pause_freezes_the_container_and_a_fresh_provider_sees_it(
    sandbox: DockerSandbox,
    session_key: str,
    docker_engine: Engine,
    resource_dir: Path,
    test_image: str,
) -> None:
    """Pause keeps the workspace; attach leaves it paused; resume (or an exec) thaws it."""
    await sandbox.write_file("kept.txt", b"kept")
    await sandbox.pause()
    await sandbox.pause()  # idempotent
    inspect = await docker_engine.inspect_container(sandbox.container_id)
    assert inspect is not None
    assert inspect["State"]["Paused"] is True
    fresh = make_provider(resource_dir, test_image)
    try:
        attached = await fresh.attach(session_key, sandbox.ref, SandboxSpec(timeout=60.0))
        assert await attached.is_paused()  # attach did not unpause it
        assert await attached.read_file("kept.txt") == b"kept"  # archives work while frozen
        assert await attached.is_paused()
        await attached.resume()
        await attached.resume()  # idempotent
    finally:
        await fresh.aclose()
    assert not await sandbox.is_paused()
    assert (await sandbox.exec(Command(("cat", "kept.txt")))).stdout == b"kept"


async def test_a_paused_command_finishes_only_after_the_resume(sandbox: DockerSandbox) -> None:
    """A command running at the pause is frozen with its sandbox and completes after resume."""
    waiting = asyncio.create_task(
        sandbox.exec(sh("touch started; while [ ! -e go ]; do sleep 0.01; done; echo done"))
    )
    try:
        await wait_for_file(sandbox, "started")
        await sandbox.pause()
        await sandbox.write_file("go", b"")
        assert await sandbox.is_paused()
        assert not waiting.done()
        await sandbox.resume()
        result = await asyncio.wait_for(waiting, 30)
        assert (result.exit_code, result.stdout) == (0, b"done\n")
    finally:
        waiting.cancel()
        with contextlib.suppress(BaseException):
            await waiting


async def test_destroy_removes_a_paused_container(
    sandbox: DockerSandbox, docker_engine: Engine
) -> None:
    """A paused sandbox is destroyed as it is."""
    await sandbox.pause()
    await sandbox.destroy()
    assert await docker_engine.inspect_container(sandbox.container_id) is None


async def test_a_published_port_is_reached_through_its_url(
    docker_engine: Engine, resource_dir: Path, test_image: str, session_key: str
) -> None:
    """A busybox httpd in a bridge sandbox answers through expose_port's 127.0.0.1 URL."""
    provider = make_provider(resource_dir, test_image, publish_ports=(PORT,))
    sandbox = await provider.create(
        session_key, SandboxSpec(timeout=60.0, network=NetworkMode.BRIDGE)
    )
    server: asyncio.Task[object] | None = None
    try:
        inspect = await docker_engine.inspect_container(sandbox.container_id)
        assert inspect is not None
        bindings = inspect["HostConfig"]["PortBindings"]
        assert bindings == {f"{PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}
        exposed = await sandbox.expose_port(PORT)
        url = exposed.url
        assert url.startswith("http://127.0.0.1:")
        assert dict(exposed.headers) == {}
        assert str(exposed) == url
        await sandbox.write_file("index.html", b"hello from the sandbox")
        server = asyncio.create_task(
            sandbox.exec(Command(("httpd", "-f", "-p", str(PORT), "-h", "/workspace")))
        )
        async with httpx.AsyncClient(timeout=5) as client:

            async def answers() -> bool:
                try:
                    response = await client.get(url + "/index.html")
                except httpx.TransportError:
                    return False
                return response.status_code == 200

            await eventually(answers, 30, "the sandbox's server answering")
            assert (await client.get(url + "/index.html")).text == "hello from the sandbox"
        with pytest.raises(PermanentError, match="not published") as refused:
            await sandbox.expose_port(PORT + 1)
        assert "MANGO_SANDBOX_PORTS" in (refused.value.hint or "")
        with pytest.raises(InvalidInput):
            await sandbox.expose_port(0)
        # The provider's form works from the reference alone, whatever the spec.
        await provider.pause(session_key, sandbox.ref)
        assert await sandbox.is_paused()
        with pytest.raises(OwnershipError):
            await provider.resume(session_key + "-other", sandbox.ref)
        await provider.resume(session_key, sandbox.ref)
        assert (await client_get(url)) == "hello from the sandbox"
    finally:
        if server is not None:
            server.cancel()
            with contextlib.suppress(BaseException):
                await server
        await sandbox.destroy()
        await provider.aclose()


async def test_no_network_sandbox_publishes_nothing(
    resource_dir: Path, test_image: str, session_key: str
) -> None:
    """A sandbox without a network has no published port, whatever MANGO_SANDBOX_PORTS says."""
    provider = make_provider(resource_dir, test_image, publish_ports=(PORT,))
    sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
    try:
        with pytest.raises(PermanentError, match="not published"):
            await sandbox.expose_port(PORT)
    finally:
        await sandbox.destroy()
        await provider.aclose()
