"""Deleting Docker sandboxes: from another process, by name, and after an interrupted removal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.domain.errors import OwnershipError
from mango.domain.values import SandboxSpec
from mango.provider.hostdirs import RemovalStep, observe_removals
from mango_provider_docker import DockerProvider, DockerSandbox, Engine
from mango_provider_docker.layout import host_dir

from .conftest import make_provider
from .helpers import sh, wait_for_file

pytestmark = pytest.mark.docker

SPEC = SandboxSpec(timeout=60.0)


class Interrupted(Exception):
    """Stands for a crash between two steps of a removal (the test's own process survives)."""


@pytest.fixture
def interrupt_at() -> Iterator[list[RemovalStep]]:
    """Steps of the next removal at which to stop (once each)."""
    steps: list[RemovalStep] = []

    def observe(step: RemovalStep, _path: Path) -> None:
        if step in steps:
            steps.remove(step)
            raise Interrupted(step)

    undo = observe_removals(observe)
    try:
        yield steps
    finally:
        undo()


def leftovers(resource_dir: Path) -> list[str]:
    """What is left under the resource directory."""
    return sorted(path.name for path in resource_dir.iterdir()) if resource_dir.exists() else []


async def test_a_destroy_from_another_process_stops_running_commands(
    provider: DockerProvider, session_key: str, resource_dir: Path, test_image: str
) -> None:
    """A provider that did not start the command (another process) destroys: it ends cancelled."""
    sandbox = await provider.create(session_key, SPEC)
    running = asyncio.ensure_future(sandbox.exec(sh(": > up; exec sleep 300")))
    await wait_for_file(sandbox, "up")
    other = make_provider(resource_dir, test_image)
    try:
        await other.destroy(session_key, sandbox.ref)
    finally:
        await other.aclose()
    result = await asyncio.wait_for(running, 30.0)
    assert (result.cancelled, result.exit_code) == (True, -1)
    assert leftovers(resource_dir) == []


async def test_a_command_killed_inside_a_running_container_keeps_its_137(
    sandbox: DockerSandbox,
) -> None:
    """Only a torn-down container turns a SIGKILL into cancelled; the command's own stays 137."""
    result = await sandbox.exec(sh("kill -9 $$"))
    assert (result.exit_code, result.cancelled) == (137, False)


async def test_purge_removes_container_and_host_dir_by_name(
    provider: DockerProvider, session_key: str, resource_dir: Path
) -> None:
    """purge(key) needs no reference: the container named for the key and its host directory go."""
    sandbox = await provider.create(session_key, SPEC)
    assert leftovers(resource_dir) == [provider.ownership.name(session_key)]
    await provider.purge(session_key)
    await provider.purge(session_key)
    assert await provider.find(session_key) is None
    assert leftovers(resource_dir) == []
    assert await provider.engine.inspect_container(sandbox.container_id) is None


@pytest.mark.parametrize("step", ["renamed", "removed"])
async def test_an_interrupted_destroy_is_finished_next_time(
    provider: DockerProvider,
    session_key: str,
    resource_dir: Path,
    interrupt_at: list[RemovalStep],
    step: RemovalStep,
) -> None:
    """Stopped between steps, destroy leaves the labelled container: find, purge finish it."""
    sandbox = await provider.create(session_key, SPEC)
    interrupt_at.append(step)
    with pytest.raises(Interrupted):
        await provider.destroy(session_key, sandbox.ref)
    inspect = await provider.engine.inspect_container(sandbox.container_id)
    assert inspect is not None
    assert not inspect["State"]["Running"]  # killed first: nothing runs in it any more
    assert await provider.find(session_key) == sandbox.ref
    await provider.purge(session_key)
    assert leftovers(resource_dir) == []
    assert await provider.engine.inspect_container(sandbox.container_id) is None


async def test_a_host_dir_without_a_container_is_purged(
    provider: DockerProvider, session_key: str, resource_dir: Path
) -> None:
    """A crash between the host directory and the container at create leaves only the directory."""
    directory = host_dir(resource_dir, provider.ownership, session_key)
    (directory / "mounted").mkdir(parents=True)
    leftover = directory.with_name(directory.name + ".deleting-00ff")
    leftover.mkdir()
    assert await provider.find(session_key) is None
    await provider.purge(session_key)
    assert leftovers(resource_dir) == []


async def test_purge_leaves_a_squatter_alone(
    provider: DockerProvider,
    docker_engine: Engine,
    session_key: str,
    resource_dir: Path,
    test_image: str,
) -> None:
    """A container under the key's name without its labels is not ours, even when forced."""
    name = provider.ownership.name(session_key)
    squatter = await docker_engine.create_container(
        name,
        {
            "Image": test_image,
            "Cmd": ["sh", "-c", "sleep 300"],
            "Labels": {"io.mango.test-run": "squatter"},
        },
    )
    assert squatter is not None
    host = host_dir(resource_dir, provider.ownership, session_key)
    host.mkdir(parents=True)
    try:
        with pytest.raises(OwnershipError):
            await provider.purge(session_key)
        await provider.purge(session_key, force=True)
        assert await docker_engine.inspect_container(squatter) is not None
        assert leftovers(resource_dir) == []
    finally:
        await docker_engine.remove_container(squatter)
