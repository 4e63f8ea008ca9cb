"""The official ``cubesandbox`` SDK drives the fake: if they disagree, the fake is wrong.

The SDK (``cubesandbox``, a test-only dependency) is configured as a
CubeSandbox deployment documents it: ``CUBE_API_URL`` for CubeAPI and
``CUBE_PROXY_NODE_IP`` / ``CUBE_PROXY_PORT_HTTP`` for the CubeProxy node, which
every envd connection is dialled to while keeping the sandbox's virtual host
(``49983-<id>.<domain>``). It sends ``X-API-Key`` on both planes, where
mango's client (after the Go SDK) sends ``Authorization: Bearer`` to CubeAPI:
the fake accepts both, as CubeAPI's auth callback does.

The SDK is synchronous, so its calls run in a worker thread while the fake
serves on the test's event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import attrs
import pytest
from cubesandbox import Config, Sandbox

from mango.provider import Command, SandboxSpec
from mango_provider_e2b import E2BProvider
from mango_provider_e2b.conformance import cube_fake_options
from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig

CONFIG = FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local")
T = TypeVar("T")


@pytest.fixture
async def cube_fake(tmp_path: Path) -> AsyncIterator[E2BFakeService]:
    """A fake in Cube mode."""
    async with E2BFakeService.create(tmp_path / "cube", CONFIG) as service:
        yield service


@pytest.fixture
def sdk_config(cube_fake: E2BFakeService) -> Config:
    """The SDK's configuration for the fake: CubeAPI, the proxy node and the sandbox domain."""
    address = urlsplit(cube_fake.url)
    return Config(
        api_url=cube_fake.url,
        api_key=CONFIG.api_key,
        template_id="base",
        proxy_node_ip=address.hostname,
        proxy_port=address.port or 80,
        sandbox_domain=CONFIG.domain,
        request_timeout=10.0,
    )


async def in_thread(work: Callable[[], T]) -> T:
    """Run blocking SDK calls off the loop the fake serves on."""
    return await asyncio.to_thread(work)


async def test_sdk_lifecycle_against_the_fake(
    cube_fake: E2BFakeService, sdk_config: Config
) -> None:
    """Create with metadata, list, info, connect, commands, files and kill via the SDK."""
    sandbox = await in_thread(
        lambda: Sandbox.create(metadata={"who": "sdk", "run": "1"}, config=sdk_config)
    )
    try:
        assert cube_fake.state(sandbox.sandbox_id) == "running"

        listed = await in_thread(lambda: Sandbox.list(config=sdk_config))
        assert [item["sandboxID"] for item in listed] == [sandbox.sandbox_id]
        assert listed[0]["metadata"] == {"who": "sdk", "run": "1"}
        info = await in_thread(sandbox.get_info)
        assert (info.sandbox_id, info.sandbox_domain) == (sandbox.sandbox_id, CONFIG.domain)

        again = await in_thread(lambda: Sandbox.connect(sandbox.sandbox_id, config=sdk_config))
        result = await in_thread(lambda: again.commands.run("echo hello; echo oops >&2"))
        assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "oops\n", 0)
        failed = await in_thread(lambda: sandbox.commands.run("printf partial; exit 7"))
        assert (failed.stdout, failed.exit_code) == ("partial", 7)

        await in_thread(lambda: sandbox.files.write("/workspace/sdk/note.txt", "by the SDK"))
        assert await in_thread(lambda: sandbox.files.read("/workspace/sdk/note.txt")) == (
            "by the SDK"
        )
        assert await in_thread(lambda: sandbox.files.exists("/workspace/sdk/note.txt"))
        assert not await in_thread(lambda: sandbox.files.exists("/workspace/sdk/none.txt"))
        catted = await in_thread(lambda: sandbox.commands.run("cat /workspace/sdk/note.txt"))
        assert catted.stdout == "by the SDK"
    finally:
        await in_thread(sandbox.kill)
    assert cube_fake.state(sandbox.sandbox_id) == "deleted"
    assert await in_thread(lambda: Sandbox.list(config=sdk_config)) == []


async def test_sdk_and_mango_see_the_same_sandbox(
    cube_fake: E2BFakeService, sdk_config: Config
) -> None:
    """What mango writes the SDK reads and the other way round; the SDK lists mango's labels."""
    namespace = f"oracle-{uuid.uuid4().hex[:8]}"
    options = attrs.evolve(cube_fake_options(cube_fake.url, CONFIG), template="base")
    provider = E2BProvider(options, namespace=namespace)
    session_key = f"s-{uuid.uuid4().hex[:8]}"
    try:
        mine = await provider.create(session_key, SandboxSpec(timeout=30.0))
        await mine.write_file("shared/from-mango.txt", b"written by mango")
        theirs = await in_thread(lambda: Sandbox.connect(mine.ref.external_id, config=sdk_config))
        read = await in_thread(lambda: theirs.files.read("/workspace/shared/from-mango.txt"))
        assert read == "written by mango"
        await in_thread(
            lambda: theirs.files.write("/workspace/shared/from-sdk.txt", "written by the SDK")
        )
        assert await mine.read_file("shared/from-sdk.txt") == b"written by the SDK"
        ran = await mine.exec(Command(argv=("cat", "shared/from-sdk.txt")))
        assert (ran.stdout, ran.exit_code) == (b"written by the SDK", 0)

        listed = await in_thread(lambda: Sandbox.list(config=sdk_config))
        assert [item["sandboxID"] for item in listed] == [mine.ref.external_id]
        labels = listed[0]["metadata"]
        assert labels == provider.ownership.labels(session_key)

        await in_thread(theirs.kill)
        assert await provider.find(session_key) is None
    finally:
        await provider.aclose()


async def test_sdk_pauses_and_resumes_the_fake(
    cube_fake: E2BFakeService, sdk_config: Config
) -> None:
    """CubeAPI's pause (204, then ``paused``; 409 a second time) and resume (201; 409 when
    running) as the SDK calls them; ``connect`` resumes too; the workspace is kept; a command
    that was running is frozen meanwhile and finishes after the resume."""
    from cubesandbox._exceptions import CubeSandboxError

    def status(call: Callable[[], object]) -> int | None:
        try:
            call()
        except CubeSandboxError as exc:
            return exc.status_code
        return None

    sandbox = await in_thread(lambda: Sandbox.create(config=sdk_config))
    try:
        await in_thread(lambda: sandbox.files.write("/workspace/kept.txt", "kept"))
        await in_thread(lambda: sandbox.pause(interval=0.05))
        assert cube_fake.state(sandbox.sandbox_id) == "paused"
        assert (await in_thread(sandbox.get_info)).get("state") == "paused"
        assert await in_thread(lambda: status(lambda: sandbox.pause(wait=False))) == 409
        assert await in_thread(lambda: status(sandbox.resume)) is None
        assert cube_fake.state(sandbox.sandbox_id) == "running"
        assert await in_thread(lambda: status(sandbox.resume)) == 409
        assert await in_thread(lambda: sandbox.files.read("/workspace/kept.txt")) == "kept"
        await in_thread(lambda: sandbox.pause(interval=0.05))
        again = await in_thread(lambda: Sandbox.connect(sandbox.sandbox_id, config=sdk_config))
        assert cube_fake.state(sandbox.sandbox_id) == "running"
        ran = await in_thread(lambda: again.commands.run("cat /workspace/kept.txt"))
        assert (ran.stdout, ran.exit_code) == ("kept", 0)
    finally:
        await in_thread(sandbox.kill)
    for call in (lambda: sandbox.pause(wait=False), sandbox.resume):
        assert await in_thread(lambda call=call: status(call)) == 404
