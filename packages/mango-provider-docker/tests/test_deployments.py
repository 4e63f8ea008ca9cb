"""find, destroy, list_owned and health; two deployments sharing one daemon stay apart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.app import InMemoryBindingStore
from mango.provider import InvalidInput, OwnershipError, SandboxNotFound, SandboxRef, SandboxSpec
from mango_provider_docker import DockerProvider, Engine

from .conftest import RUN_LABELS, make_provider
from .helpers import sh

pytestmark = pytest.mark.docker

SPEC = SandboxSpec(timeout=60.0)


@pytest.fixture
async def deployments(
    docker_engine: Engine, test_image: str, tmp_path: Path
) -> AsyncIterator[tuple[DockerProvider, DockerProvider]]:
    """Two deployments (two stores, two namespaces) on one daemon and one resource dir."""
    namespaces = [await InMemoryBindingStore().deployment_namespace() for _ in range(2)]
    assert namespaces[0] != namespaces[1]
    providers = [
        make_provider(tmp_path / "resources", test_image, namespace=namespace)
        for namespace in namespaces
    ]
    try:
        yield providers[0], providers[1]
    finally:
        for provider in providers:
            for owned in await provider.list_owned():
                await docker_engine.remove_container(owned.ref.external_id)
            await provider.aclose()


async def test_one_deployments_destroy_keeps_the_others_container_and_host_dir(
    deployments: tuple[DockerProvider, DockerProvider], docker_engine: Engine, session_key: str
) -> None:
    """Same Session id in two namespaces: destroying one leaves the other's container and dir.

    The full two-deployment scenario (find, list_owned, attach and destroy
    refused across deployments) runs for every provider on real PostgreSQL in
    mango-core's ``tests/integration/test_deployments.py``.
    """
    one, two = deployments
    first = await one.create(session_key, SPEC)
    second = await two.create(session_key, SPEC)
    assert (first.container_id, first.host_dir) != (second.container_id, second.host_dir)
    with pytest.raises(OwnershipError, match="another deployment"):
        await one.destroy(session_key, second.ref)
    await one.destroy(session_key, first.ref)
    assert await docker_engine.inspect_container(first.container_id) is None
    assert not first.host_dir.exists()
    assert second.host_dir.is_dir()
    assert [owned.ref for owned in await two.list_owned()] == [second.ref]
    assert (await second.exec(sh("true"))).exit_code == 0


async def test_destroy_without_attaching_is_idempotent_and_checks_the_session(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """destroy(key, ref) removes by id after the label check; again is success."""
    sandbox = await provider.create(session_key, SPEC)
    with pytest.raises(OwnershipError, match="another session"):
        await provider.destroy(session_key + "-other", sandbox.ref)
    with pytest.raises(OwnershipError):
        await provider.destroy(session_key, SandboxRef("local", sandbox.container_id))
    with pytest.raises(InvalidInput):
        await provider.destroy(session_key, SandboxRef("docker", "not-an-id"))
    await provider.destroy(session_key, sandbox.ref)
    assert await docker_engine.inspect_container(sandbox.container_id) is None
    await provider.destroy(session_key, sandbox.ref)
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, sandbox.ref, SPEC)


async def test_find_is_read_only_and_refuses_a_squatter(
    provider: DockerProvider, docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """find never creates; a container squatting the name without labels is OwnershipError."""
    assert await provider.find(session_key) is None
    assert await provider.list_owned() == []
    config = {"Image": test_image, "Cmd": ["sleep", "300"], "Labels": dict(RUN_LABELS)}
    squatter = await docker_engine.create_container(provider.ownership.name(session_key), config)
    assert squatter is not None
    try:
        with pytest.raises(OwnershipError, match="unmanaged"):
            await provider.find(session_key)
        with pytest.raises(OwnershipError, match="unmanaged"):
            await provider.destroy(session_key, SandboxRef("docker", squatter))
        assert await provider.list_owned() == []
    finally:
        await docker_engine.remove_container(squatter)


async def test_list_owned_includes_stopped_containers(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """A stopped container is still owned; list_owned reports it."""
    sandbox = await provider.create(session_key, SPEC)
    docker = await docker_engine.client()
    await docker.containers.container(sandbox.container_id).stop(t=0)
    try:
        assert [owned.ref for owned in await provider.list_owned()] == [sandbox.ref]
    finally:
        await provider.destroy(session_key, sandbox.ref)


async def test_health_reports_the_engine(provider: DockerProvider) -> None:
    """health() pings the daemon and names its version."""
    assert "Docker Engine" in await provider.health()


async def test_destroy_of_a_stale_ref_leaves_the_newer_sandbox_alone(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """A ref to a removed container never removes the host directory of the key's new one."""
    old = await provider.create(session_key, SPEC)
    await old.destroy()
    new = await provider.create(session_key, SPEC)
    assert new.ref != old.ref
    await provider.destroy(session_key, old.ref)
    assert new.host_dir.is_dir()
    assert await provider.find(session_key) == new.ref
    await provider.destroy(session_key, new.ref)
    assert not new.host_dir.exists()
