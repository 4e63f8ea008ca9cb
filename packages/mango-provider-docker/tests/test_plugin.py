"""Registration, settings, limits parsing and error translation: no daemon needed."""

from __future__ import annotations

import io
from pathlib import Path

import aiodocker
import aiohttp
import pytest

import mango_provider_docker
from mango.config import state_dir
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import (
    ConfigurationError,
    InvalidInput,
    ProviderUnavailable,
    SandboxNotFound,
    is_permanent,
)
from mango.domain.registry import (
    ConformanceTargetRegistry,
    ProviderContext,
    ProviderRegistry,
    SupportLevel,
)
from mango.domain.values import SandboxSpec
from mango.plugins import load_plugins
from mango_provider_docker import DockerProvider, plugin, read_docker_settings
from mango_provider_docker.container import Limits, parse_memory, resolve_limits
from mango_provider_docker.engine import engine_errors, translate_docker_error
from mango_provider_docker.settings import SETTINGS, StderrProgress, open_docker_provider


def test_plugin_module_holds_only_hookimpls() -> None:
    """plugin.py exposes the marker and the two hooks, nothing else."""
    assert plugin.__all__ == [
        "hookimpl",
        "mango_register_conformance_targets",
        "mango_register_providers",
    ]


def test_public_names_are_sorted_and_exported() -> None:
    """The package ``__all__`` is sorted and every name in it exists."""
    names = mango_provider_docker.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(mango_provider_docker, name)


def test_registration_declares_package_setup_and_the_resource_mounts() -> None:
    """``docker`` registers through the entry point: setup, files, outputs, skills, pause, ports."""
    registration = load_plugins().providers().get("docker")
    assert registration.support_level is SupportLevel.AVAILABLE
    assert registration.capabilities == CapabilitySet.of(
        Capability.PACKAGE_SETUP,
        Capability.FILE_RESOURCES,
        Capability.SESSION_OUTPUTS,
        Capability.FILE_API,
        Capability.PAUSE,
        Capability.EXPOSED_PORTS,
        Capability.BACKGROUND_PROCESSES,
        Capability.SKILL_BUNDLES,
    )
    names = {setting.env for setting in registration.settings}
    assert {
        "MANGO_SANDBOX_IMAGE",
        "MANGO_SANDBOX_RESOURCE_DIR",
        "DOCKER_HOST",
        "MANGO_SANDBOX_MEMORY",
        "MANGO_SANDBOX_CPUS",
        "MANGO_SANDBOX_PIDS_LIMIT",
        "MANGO_MAX_OUTPUT_BYTES",
        "MANGO_MAX_READ_BYTES",
        "MANGO_MAX_PROCESS_LOG_BYTES",
    } <= names
    assert not any(setting.secret for setting in SETTINGS)


def test_factory_is_lazy_and_matches_the_registration() -> None:
    """Opening the provider does no I/O, even with an unreachable daemon."""
    environ = {
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "MANGO_SANDBOX_RESOURCE_DIR": "/nonexistent/resources",
    }
    registry = ProviderRegistry()
    plugin.mango_register_providers(registry)
    provider = registry.open("docker", ProviderContext(namespace="ns-test", environ=environ))
    assert isinstance(provider, DockerProvider)
    assert provider.host == "unix:///nonexistent/docker.sock"
    assert provider.namespace == "ns-test"


async def test_health_without_a_daemon_is_unavailable() -> None:
    """health() is a real round trip: DOCKER_HOST=unix:///nonexistent is ProviderUnavailable."""
    registry = ProviderRegistry()
    plugin.mango_register_providers(registry)
    context = ProviderContext(namespace="ns-test", environ={"DOCKER_HOST": "unix:///nonexistent"})
    provider = registry.open("docker", context)
    try:
        with pytest.raises(ProviderUnavailable, match="Docker Engine"):
            await provider.health()
    finally:
        await provider.aclose()


def test_settings_defaults() -> None:
    """Empty environment: default image, limits, cap, and docker/ in mango's state directory."""
    settings = read_docker_settings({})
    assert settings.image == "alpine:latest"
    assert settings.resource_dir == state_dir({}) / "docker"
    assert (settings.memory, settings.cpus, settings.pids_limit) == ("1g", 1.0, 512)
    assert settings.max_output_bytes == 1024 * 1024
    assert settings.host is None
    assert settings.api_version is None
    assert settings.pull
    assert read_docker_settings({"MANGO_STATE_DIR": "/s"}).resource_dir == Path("/s/docker")


def test_ports_setting() -> None:
    """MANGO_SANDBOX_PORTS: sorted distinct ports; anything else is named."""
    assert read_docker_settings({}).publish_ports == ()
    ports = read_docker_settings({"MANGO_SANDBOX_PORTS": " 8080, 3000,8080 "}).publish_ports
    assert ports == (3000, 8080)
    for bad in ("0", "65536", "http", "80,x"):
        with pytest.raises(ConfigurationError, match="MANGO_SANDBOX_PORTS"):
            read_docker_settings({"MANGO_SANDBOX_PORTS": bad})


def test_settings_from_environment() -> None:
    """Every variable is read; 0 disables a limit."""
    settings = read_docker_settings(
        {
            "MANGO_SANDBOX_IMAGE": "busybox:1",
            "MANGO_SANDBOX_RESOURCE_DIR": "/r",
            "DOCKER_HOST": "tcp://127.0.0.1:2375",
            "DOCKER_API_VERSION": "1.41",
            "MANGO_SANDBOX_MEMORY": "0",
            "MANGO_SANDBOX_CPUS": "2.5",
            "MANGO_SANDBOX_PIDS_LIMIT": "0",
            "MANGO_SANDBOX_PULL": "0",
            "MANGO_MAX_OUTPUT_BYTES": "4096",
            "MANGO_MAX_READ_BYTES": "8192",
        }
    )
    assert settings.image == "busybox:1"
    assert settings.resource_dir == Path("/r")
    assert settings.host == "tcp://127.0.0.1:2375"
    assert settings.api_version == "1.41"
    assert (settings.memory, settings.cpus, settings.pids_limit) == ("0", 2.5, 0)
    assert not settings.pull
    assert (settings.max_output_bytes, settings.max_read_bytes) == (4096, 8192)
    provider = open_docker_provider(
        ProviderContext(
            namespace="ns-test",
            environ={"MANGO_SANDBOX_RESOURCE_DIR": "/r", "MANGO_SANDBOX_MEMORY": "0"},
        )
    )
    assert provider.image == "alpine:latest"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MANGO_SANDBOX_RESOURCE_DIR", "relative/dir"),
        ("MANGO_STATE_DIR", "relative/state"),
        ("MANGO_SANDBOX_MEMORY", "lots"),
        ("MANGO_SANDBOX_MEMORY", "1k"),
        ("MANGO_SANDBOX_CPUS", "-1"),
        ("MANGO_SANDBOX_CPUS", "nan"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "1.5"),
        ("MANGO_SANDBOX_PULL", "maybe"),
        ("MANGO_MAX_OUTPUT_BYTES", "0"),
        ("MANGO_MAX_OUTPUT_BYTES", str(1 << 40)),
        # Absurd values that used to pass and fail later (a traceback, or a Docker 500
        # retried forever, or a container that cannot run a command).
        ("MANGO_SANDBOX_CPUS", "1e300"),
        ("MANGO_SANDBOX_CPUS", "inf"),
        ("MANGO_SANDBOX_CPUS", "0.001"),
        ("MANGO_SANDBOX_CPUS", "4096"),
        ("MANGO_SANDBOX_MEMORY", "99999999p"),
        ("MANGO_SANDBOX_MEMORY", "9" * 400),
        ("MANGO_SANDBOX_MEMORY", "2p"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "99999999999999999999"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "4194305"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "1"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "15"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "-1"),
        ("DOCKER_API_VERSION", "abc"),
        ("DOCKER_API_VERSION", "1.41x"),
        ("MANGO_MAX_READ_BYTES", "0"),
        ("MANGO_MAX_READ_BYTES", "2000000000"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    """A malformed value is a ConfigurationError that names its variable."""
    with pytest.raises(ConfigurationError) as caught:
        read_docker_settings({name: value})
    assert name in str(caught.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MANGO_SANDBOX_MEMORY", "6m"),
        ("MANGO_SANDBOX_MEMORY", "1p"),
        ("MANGO_SANDBOX_CPUS", "0.01"),
        ("MANGO_SANDBOX_CPUS", "1024"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "16"),
        ("MANGO_SANDBOX_PIDS_LIMIT", "4194304"),
        ("DOCKER_API_VERSION", "v1.41"),
    ],
)
def test_settings_accept_their_bounds(name: str, value: str) -> None:
    """The ends of each range are accepted."""
    read_docker_settings({name: value})


def test_api_version_errors_talk_about_the_api_version() -> None:
    """A malformed pin and a version the daemon refuses hint at DOCKER_API_VERSION, not the host."""
    with pytest.raises(ConfigurationError) as malformed:
        DockerProvider("/r", api_version="abc")
    assert "DOCKER_API_VERSION" in str(malformed.value.hint)
    assert "DOCKER_HOST" not in f"{malformed.value} {malformed.value.hint}"
    refused = translate_docker_error(
        aiodocker.DockerError(
            400, "client version 1.99 is too new. Maximum supported API version is 1.41"
        ),
        "ping the Docker Engine",
        "unix:///s",
    )
    assert type(refused) is ConfigurationError
    assert "DOCKER_API_VERSION" in str(refused.hint)


def test_absurd_limits_are_invalid_input_from_the_python_api() -> None:
    """The provider's own arguments are checked the same way: InvalidInput, never a traceback."""
    for options in ({"cpus": 1e300}, {"memory": "99999999p"}, {"pids_limit": 1}):
        with pytest.raises(InvalidInput):
            DockerProvider("/r", **options)  # type: ignore[arg-type]
    defaults = Limits(memory_bytes=1 << 30, nano_cpus=10**9, pids_limit=512)
    for fields in ({"cpus": 1e300}, {"memory": "99999999p"}):
        with pytest.raises(InvalidInput):
            resolve_limits(SandboxSpec(**fields), defaults)  # type: ignore[arg-type]
    for spec in (
        SandboxSpec(cpus=0.005),
        SandboxSpec(memory="5m"),
        SandboxSpec(pids_limit=15),
        SandboxSpec(pids_limit=10**20),
    ):
        with pytest.raises(InvalidInput):
            resolve_limits(spec, defaults)


def test_memory_sizes_use_binary_units() -> None:
    """Docker's units: k, m, g, t with optional ``b``/``ib``; 0 means no limit."""
    assert parse_memory("512m") == 512 << 20
    assert parse_memory("1.5GiB") == 3 << 29
    assert parse_memory("2g") == 2 << 30
    assert parse_memory("6291456") == 6 << 20
    assert parse_memory("0") == 0
    for bad in ("", "m", "12x", "-1g", "5m"):
        with pytest.raises(InvalidInput):
            parse_memory(bad)


@pytest.mark.parametrize(
    ("memory", "cpus", "expected"),
    [
        ("2Gi", 1, Limits(memory_bytes=2 << 30, nano_cpus=10**9, pids_limit=512)),
        ("512Mi", "500m", Limits(memory_bytes=512 << 20, nano_cpus=5 * 10**8, pids_limit=512)),
        ("1.5GiB", 0.25, Limits(memory_bytes=3 << 29, nano_cpus=25 * 10**7, pids_limit=512)),
        (6 << 20, "2", Limits(memory_bytes=6 << 20, nano_cpus=2 * 10**9, pids_limit=512)),
    ],
)
def test_the_parsed_sizes_become_the_engine_units(
    memory: str | int, cpus: float | str, expected: Limits
) -> None:
    """Any spelling of the one grammar (Kubernetes' 2Gi too) becomes bytes and NanoCpus."""
    defaults = Limits(memory_bytes=1 << 30, nano_cpus=10**9, pids_limit=512)
    spec = SandboxSpec(memory=memory, cpus=cpus)  # type: ignore[arg-type]
    assert resolve_limits(spec, defaults) == expected


def test_spec_limits_win_over_defaults() -> None:
    """A spec value replaces the default; an unset one keeps it."""
    defaults = Limits(memory_bytes=1 << 30, nano_cpus=10**9, pids_limit=512)
    assert resolve_limits(SandboxSpec(), defaults) == defaults
    assert resolve_limits(SandboxSpec(memory="64m", cpus=0.25, pids_limit=64), defaults) == Limits(
        memory_bytes=64 << 20, nano_cpus=25 * 10**7, pids_limit=64
    )


@pytest.mark.parametrize(
    ("status", "expected", "permanent"),
    [
        (900, ProviderUnavailable, False),
        (404, SandboxNotFound, False),
        (400, InvalidInput, True),
        (403, ConfigurationError, True),
        (409, ProviderUnavailable, False),
        (500, ProviderUnavailable, False),
    ],
)
def test_docker_errors_map_to_the_mango_tree(
    status: int, expected: type[Exception], permanent: bool
) -> None:
    """Each HTTP status of the Engine becomes one mango error class."""
    error = translate_docker_error(aiodocker.DockerError(status, "boom"), "probe", "unix:///s")
    assert type(error) is expected
    assert is_permanent(error) is permanent


@pytest.mark.parametrize(
    "message",
    [
        (
            "json: cannot unmarshal number 99999999999999999999 into Go struct field "
            "HostConfig.HostConfig.PidsLimit of type int64"
        ),
        (
            "failed to create shim task: OCI runtime create failed: runc create failed: unable "
            "to start container process: error during container init: error setting cgroup "
            'config for procHooks process: failed to write "9223372036854775807": write '
            "/sys/fs/cgroup/pids/docker/1/pids.max: invalid argument: unknown"
        ),
    ],
)
def test_a_500_no_retry_can_cure_is_permanent(message: str) -> None:
    """The daemon's 500s for an impossible request (dockerd 20.10's words) are InvalidInput."""
    error = translate_docker_error(aiodocker.DockerError(500, message), "create", "unix:///s")
    assert type(error) is InvalidInput
    assert is_permanent(error)


def test_engine_errors_translates_transport_failures() -> None:
    """aiohttp and OS errors become ProviderUnavailable, chained to the cause."""
    for cause in (aiohttp.ClientConnectionError("reset"), ConnectionRefusedError(), TimeoutError()):
        with pytest.raises(ProviderUnavailable) as caught, engine_errors("probe", "unix:///s"):
            raise cause
        assert caught.value.__cause__ is cause


def test_conformance_target_is_registered() -> None:
    """``mango-conformance run docker`` finds the offline target."""
    registry = ConformanceTargetRegistry()
    plugin.mango_register_conformance_targets(registry)
    assert registry.get("docker").provider == "docker"


async def test_conformance_target_without_a_daemon_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no daemon, opening the target raises ProviderUnavailable with a clear message."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    registry = ConformanceTargetRegistry()
    plugin.mango_register_conformance_targets(registry)
    with pytest.raises(ProviderUnavailable, match="needs a running Docker Engine"):
        async with registry.get("docker").open(tmp_path):
            pytest.fail("the target opened without a daemon")


def test_pull_progress_is_throttled() -> None:
    """Status changes always print; byte-progress lines at most once per interval."""
    now = [0.0]
    out = io.StringIO()
    progress = StderrProgress(stream=out, interval=1.0, clock=lambda: now[0])
    progress("pulling image x")
    progress("abc Downloading [=>   ] 1MB/9MB")
    progress("abc Downloading [==>  ] 2MB/9MB")
    now[0] = 1.5
    progress("abc Downloading [===> ] 3MB/9MB")
    progress("abc Pull complete")
    assert out.getvalue().splitlines() == [
        "mango: docker: pulling image x",
        "mango: docker: abc Downloading [=>   ] 1MB/9MB",
        "mango: docker: abc Downloading [===> ] 3MB/9MB",
        "mango: docker: abc Pull complete",
    ]
