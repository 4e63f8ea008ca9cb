"""Create, attach and destroy against the real daemon: names, labels, limits, ownership."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mango.domain.errors import (
    CapabilityNotSupported,
    ConfigurationError,
    InvalidInput,
    OwnershipError,
    ProviderUnavailable,
    SandboxNotFound,
    is_permanent,
)
from mango.domain.values import NetworkMode, PackagePlan, SandboxRef, SandboxSpec
from mango.provider.ownership import LABEL_MANAGED, LABEL_NAMESPACE, LABEL_SESSION
from mango_provider_docker import DockerProvider, DockerSandbox, Engine
from mango_provider_docker.container import MIN_PIDS_LIMIT

from .conftest import NAMESPACE, OWNERSHIP, RUN_LABELS, make_provider
from .helpers import sh

pytestmark = pytest.mark.docker


async def _inspect(engine: Engine, sandbox: DockerSandbox) -> dict[str, object]:
    found = await engine.inspect_container(sandbox.container_id)
    assert found is not None
    return found


async def test_container_has_name_labels_limits_and_init(
    sandbox: DockerSandbox, docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """The provider defaults (1 GiB, 1 CPU, 512 pids), labels and init are visible in inspect."""
    inspect = await _inspect(docker_engine, sandbox)
    assert sandbox.ref == SandboxRef("docker", inspect["Id"])  # type: ignore[arg-type]
    assert inspect["Name"] == f"/{OWNERSHIP.name(session_key)}"
    config, host = inspect["Config"], inspect["HostConfig"]
    assert isinstance(config, dict)
    assert isinstance(host, dict)
    assert config["Image"] == test_image
    assert config["WorkingDir"] == "/workspace"
    labels = config["Labels"]
    assert labels[LABEL_MANAGED] == "true"
    assert labels[LABEL_NAMESPACE] == NAMESPACE
    assert labels[LABEL_SESSION] == OWNERSHIP.session_hash(session_key)
    assert session_key not in str(config)
    assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (1 << 30, 10**9, 512)
    assert host["Init"] is True
    assert host["NetworkMode"] == "none"
    pid1 = await sandbox.exec(sh("cat /proc/1/comm"))
    assert pid1.stdout.strip() in (b"docker-init", b"tini")


async def test_spec_limits_override_the_defaults(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """Memory, CPUs and pids from the spec win over the provider defaults and are enforced."""
    spec = SandboxSpec(memory="64m", cpus=0.5, pids_limit=40)
    sandbox = await provider.create(session_key, spec)
    try:
        host = (await _inspect(docker_engine, sandbox))["HostConfig"]
        assert isinstance(host, dict)
        assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (64 << 20, 5 * 10**8, 40)
        # The kernel enforces them: the container's own cgroup files (v1 or v2) say so.
        limits = await sandbox.exec(
            sh(
                "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max "
                "/sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max "
                "2>/dev/null"
            )
        )
        assert limits.stdout.split() == [b"40", str(64 << 20).encode()]
    finally:
        await sandbox.destroy()


async def test_network_is_none_by_default_and_bridge_on_request(
    provider: DockerProvider, sandbox: DockerSandbox, session_key: str
) -> None:
    """Without a network request the container has only loopback; ``bridge`` adds eth0."""
    interfaces = await sandbox.exec(sh("ls /sys/class/net"))
    assert interfaces.stdout.split() == [b"lo"]
    bridged = await provider.create(session_key + "-bridge", SandboxSpec(network="bridge"))
    try:
        listing = await bridged.exec(sh("ls /sys/class/net"))
        assert b"eth0" in listing.stdout.split()
    finally:
        await bridged.destroy()


async def test_undeclared_capabilities_are_rejected_before_anything_exists(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """Limited network raises CapabilityNotSupported; no container is made."""
    for spec in (
        SandboxSpec(network=NetworkMode.LIMITED, network_allowed_hosts=("example.com",)),
        SandboxSpec(network=NetworkMode.LIMITED, packages=PackagePlan(pip=("requests",))),
    ):
        with pytest.raises(CapabilityNotSupported):
            await provider.create(session_key, spec)
    assert await docker_engine.inspect_container(OWNERSHIP.name(session_key)) is None


async def test_invalid_limits_are_invalid_input(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """A malformed or absurd limit is a permanent InvalidInput and creates nothing.

    A size outside mango's grammar is refused when the spec is built, before
    any provider sees it; one inside it that Docker cannot take (below 6 MiB,
    too few pids) is refused by the provider's translation.
    """
    for fields in ({"memory": "lots"}, {"memory": "99999999p"}, {"cpus": 1e300}):
        with pytest.raises(InvalidInput):
            await provider.create(session_key, SandboxSpec(**fields))  # type: ignore[arg-type]
    for spec in (
        SandboxSpec(memory="1k"),
        SandboxSpec(cpus=0.001),
        SandboxSpec(pids_limit=1),
        SandboxSpec(pids_limit=10**20),
    ):
        with pytest.raises(InvalidInput):
            await provider.create(session_key, spec)
    assert await docker_engine.inspect_container(OWNERSHIP.name(session_key)) is None


async def test_the_smallest_pids_limit_still_runs_and_stops_commands(
    provider: DockerProvider, session_key: str
) -> None:
    """At MIN_PIDS_LIMIT a pipeline runs, and a timed-out one is killed (the killer fits too)."""
    sandbox = await provider.create(session_key, SandboxSpec(pids_limit=MIN_PIDS_LIMIT))
    try:
        piped = await sandbox.exec(sh("echo fits | cat | cat"))
        assert (piped.exit_code, piped.stdout) == (0, b"fits\n")
        stuck = await sandbox.exec(sh("sleep 300 | cat | cat | cat", timeout=1.0))
        assert stuck.timed_out
        after = await sandbox.exec(sh("echo still usable"))
        assert after.stdout == b"still usable\n"
    finally:
        await sandbox.destroy()


async def test_a_request_the_daemon_cannot_decode_is_permanent(
    docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """A limit past int64 gets a 500 from the daemon: InvalidInput, not a retryable error."""
    config = {
        "Image": test_image,
        "Labels": dict(RUN_LABELS),
        "HostConfig": {"PidsLimit": 99999999999999999999},
    }
    with pytest.raises(InvalidInput) as caught:
        await docker_engine.create_container(OWNERSHIP.name(session_key), config)
    assert is_permanent(caught.value)
    assert await docker_engine.inspect_container(OWNERSHIP.name(session_key)) is None


async def test_create_is_idempotent_across_instances(
    provider: DockerProvider,
    sandbox: DockerSandbox,
    session_key: str,
    test_image: str,
    resource_dir: Path,
) -> None:
    """A second create, from a fresh provider, returns the same container and workspace."""
    await sandbox.write_file("state.txt", b"kept")
    other = make_provider(resource_dir, test_image)
    try:
        again = await other.create(session_key, SandboxSpec())
        assert again.ref == sandbox.ref
        assert await again.read_file("state.txt") == b"kept"
    finally:
        await other.aclose()


async def test_concurrent_creates_end_with_one_container(
    docker_engine: Engine, test_image: str, resource_dir: Path, session_key: str
) -> None:
    """Eight providers creating one key at once all get the same, single container."""
    providers = [make_provider(resource_dir, test_image) for _ in range(8)]
    try:
        made = await asyncio.gather(*(p.create(session_key, SandboxSpec()) for p in providers))
        assert len({sandbox.ref for sandbox in made}) == 1
        labels = {**RUN_LABELS, LABEL_SESSION: OWNERSHIP.session_hash(session_key)}
        assert len(await docker_engine.list_containers(labels)) == 1
        assert (await made[0].exec(sh("printf one"))).stdout == b"one"
        await made[0].destroy()
    finally:
        await asyncio.gather(*(p.aclose() for p in providers))


async def test_attach_starts_a_stopped_container(
    sandbox: DockerSandbox,
    docker_engine: Engine,
    session_key: str,
    test_image: str,
    resource_dir: Path,
) -> None:
    """After a stop (a daemon restart without live-restore), attach starts it; data survives."""
    await sandbox.write_file("state.txt", b"kept")
    docker = await docker_engine.client()
    await docker.containers.container(sandbox.container_id).stop(t=0)
    stopped = await docker_engine.inspect_container(sandbox.container_id)
    assert stopped is not None
    assert not stopped["State"]["Running"]
    fresh = make_provider(resource_dir, test_image)
    try:
        attached = await fresh.attach(session_key, sandbox.ref, SandboxSpec())
        running = await docker_engine.inspect_container(sandbox.container_id)
        assert running is not None
        assert running["State"]["Running"]
        assert await attached.read_file("state.txt") == b"kept"
        assert (await attached.exec(sh("cat state.txt"))).stdout == b"kept"
    finally:
        await fresh.aclose()


async def test_attach_keeps_a_pause_and_exec_resumes_it(
    provider: DockerProvider, sandbox: DockerSandbox, docker_engine: Engine, session_key: str
) -> None:
    """Attach leaves a container paused behind mango's back paused; a command resumes it."""
    docker = await docker_engine.client()
    await docker.containers.container(sandbox.container_id).pause()
    attached = await provider.attach(session_key, sandbox.ref, SandboxSpec())
    assert await attached.is_paused()
    assert (await attached.exec(sh("printf awake"))).stdout == b"awake"
    assert not await attached.is_paused()


async def test_container_removed_behind_our_back_is_not_found(
    provider: DockerProvider, sandbox: DockerSandbox, docker_engine: Engine, session_key: str
) -> None:
    """Attach to a container someone else removed raises SandboxNotFound and creates nothing."""
    assert await docker_engine.remove_container(sandbox.container_id)
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, sandbox.ref, SandboxSpec())
    with pytest.raises(SandboxNotFound):
        await sandbox.read_file("anything")
    assert await docker_engine.inspect_container(OWNERSHIP.name(session_key)) is None


async def test_ownership_is_checked_on_attach(
    provider: DockerProvider, sandbox: DockerSandbox, session_key: str
) -> None:
    """Another key, another provider name, or a non-id reference are permanent errors."""
    with pytest.raises(OwnershipError):
        await provider.attach(session_key + "-other", sandbox.ref, SandboxSpec())
    with pytest.raises(OwnershipError):
        await provider.attach(
            session_key, SandboxRef("local", sandbox.ref.external_id), SandboxSpec()
        )
    for external_id in ("../../containers/json", "x" * 1000, sandbox.container_id[:12]):
        with pytest.raises(InvalidInput) as caught:
            await provider.attach(session_key, SandboxRef("docker", external_id), SandboxSpec())
        assert is_permanent(caught.value)
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, SandboxRef("docker", "0" * 64), SandboxSpec())


async def test_an_unmanaged_container_with_our_name_is_refused(
    provider: DockerProvider, docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """A container that squats the deterministic name without mango's labels is not adopted."""
    config = {"Image": test_image, "Cmd": ["sleep", "300"], "Labels": dict(RUN_LABELS)}
    squatter = await docker_engine.create_container(OWNERSHIP.name(session_key), config)
    assert squatter is not None
    try:
        with pytest.raises(OwnershipError):
            await provider.create(session_key, SandboxSpec())
        with pytest.raises(OwnershipError):
            await provider.attach(session_key, SandboxRef("docker", squatter), SandboxSpec())
    finally:
        await docker_engine.remove_container(squatter)


async def _forge(
    engine: Engine, session_key: str, image: str, host_config: dict[str, object]
) -> str:
    """A container made by hand (not started) with mango's name, labels and ``host_config``."""
    labels = {**RUN_LABELS, **OWNERSHIP.labels(session_key)}
    config = {"Image": image, "Cmd": ["sleep", "300"], "Labels": labels, "HostConfig": host_config}
    forged = await engine.create_container(OWNERSHIP.name(session_key), config)
    assert forged is not None
    return forged


MANGO_LIKE = {"Init": True, "NetworkMode": "none", "Memory": 1 << 30, "NanoCpus": 10**9}


@pytest.mark.parametrize(
    "case",
    [
        ({}, "network mode 'default'"),  # what `docker run` gives: default network, no limits
        ({**MANGO_LIKE, "PidsLimit": 512, "NetworkMode": "bridge"}, "network mode 'bridge'"),
        ({**MANGO_LIKE}, "no PidsLimit limit"),
        ({**MANGO_LIKE, "PidsLimit": 512, "Init": False}, "no init process"),
        ({**MANGO_LIKE, "PidsLimit": 512, "Privileged": True}, "privileged"),
        ({**MANGO_LIKE, "PidsLimit": 512, "CapAdd": ["SYS_ADMIN"]}, "added capabilities"),
        ({**MANGO_LIKE, "PidsLimit": 512, "Binds": ["/etc:/host-etc:ro"]}, "bind mounts"),
        ({**MANGO_LIKE, "PidsLimit": 512, "PidMode": "host"}, "PidMode 'host'"),
    ],
    ids=["docker-run", "network", "pids", "init", "privileged", "caps", "binds", "host-pid"],
)
async def test_forged_labels_on_a_hand_made_container_are_refused(
    provider: DockerProvider,
    docker_engine: Engine,
    session_key: str,
    test_image: str,
    case: tuple[dict[str, object], str],
) -> None:
    """Right name and labels, but a configuration mango never makes: not adopted, not used."""
    host_config, problem = case
    forged = await _forge(docker_engine, session_key, test_image, host_config)
    try:
        with pytest.raises(OwnershipError, match=problem) as created:
            await provider.create(session_key, SandboxSpec())
        assert is_permanent(created.value)
        with pytest.raises(OwnershipError, match=problem):
            await provider.attach(session_key, SandboxRef("docker", forged), SandboxSpec())
        # It is still the key's by its labels: find reports it, destroy may remove it.
        assert await provider.find(session_key) == SandboxRef("docker", forged)
    finally:
        await docker_engine.remove_container(forged)


async def test_a_hand_made_copy_of_mangos_configuration_is_adopted(
    provider: DockerProvider, docker_engine: Engine, session_key: str, test_image: str
) -> None:
    """The check refuses differences, not hand-made containers as such: an exact copy is used."""
    forged = await _forge(docker_engine, session_key, test_image, {**MANGO_LIKE, "PidsLimit": 512})
    try:
        sandbox = await provider.attach(session_key, SandboxRef("docker", forged), SandboxSpec())
        assert (await sandbox.exec(sh("echo adopted"))).stdout == b"adopted\n"
    finally:
        await docker_engine.remove_container(forged)


async def test_attach_checks_the_spec_but_tolerates_changed_defaults(
    provider: DockerProvider, session_key: str, test_image: str, resource_dir: Path
) -> None:
    """Limits the spec names must match; provider defaults may change between workers."""
    spec = SandboxSpec(memory="64m", network="bridge")
    sandbox = await provider.create(session_key, spec)
    try:
        other_defaults = make_provider(resource_dir, test_image, memory="2g", pids_limit=64)
        try:
            again = await other_defaults.attach(
                session_key, sandbox.ref, SandboxSpec(network="bridge", memory="64m")
            )
            assert again.ref == sandbox.ref
            with pytest.raises(OwnershipError, match="Memory"):
                await other_defaults.attach(
                    session_key, sandbox.ref, SandboxSpec(network="bridge", memory="128m")
                )
            with pytest.raises(OwnershipError, match="network mode 'bridge'"):
                await other_defaults.attach(session_key, sandbox.ref, SandboxSpec(memory="64m"))
        finally:
            await other_defaults.aclose()
    finally:
        await sandbox.destroy()


async def test_destroy_is_idempotent_and_removes_everything(
    provider: DockerProvider, docker_engine: Engine, session_key: str
) -> None:
    """Destroy removes the container and host directory; repeating it succeeds; attach fails."""
    sandbox = await provider.create(session_key, SandboxSpec())
    assert sandbox.host_dir.is_dir()
    assert oct(sandbox.host_dir.stat().st_mode & 0o777) == "0o700"
    await sandbox.destroy()
    await sandbox.destroy()
    assert await docker_engine.inspect_container(sandbox.container_id) is None
    assert not sandbox.host_dir.exists()
    assert list(sandbox.host_dir.parent.iterdir()) == []
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, sandbox.ref, SandboxSpec())
    recreated = await provider.create(session_key, SandboxSpec())
    try:
        assert recreated.ref != sandbox.ref
        with pytest.raises(FileNotFoundError):
            await recreated.read_file("state.txt")
    finally:
        await recreated.destroy()


async def test_missing_image_without_pulling_is_a_configuration_error(
    docker_engine: Engine, resource_dir: Path, session_key: str
) -> None:
    """An absent image is never pulled in tests; with pulling off it is a permanent error."""
    provider = make_provider(resource_dir, "mango-test-no-such-image:never")
    try:
        with pytest.raises(ConfigurationError):
            await provider.create(session_key, SandboxSpec())
    finally:
        await provider.aclose()


async def test_unreachable_daemon_is_provider_unavailable(tmp_path: Path) -> None:
    """A Docker host that does not answer gives a retryable ProviderUnavailable."""
    provider = DockerProvider(tmp_path, host=f"unix://{tmp_path}/no-docker.sock")
    try:
        with pytest.raises(ProviderUnavailable) as caught:
            await provider.create("key", SandboxSpec())
        assert not is_permanent(caught.value)
        assert "no-docker.sock" in str(caught.value)
    finally:
        await provider.aclose()
