"""Registration, settings and resource limits: no server needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mango_provider_opensandbox
from mango.plugins import load_plugins
from mango.provider import (
    Capability,
    CapabilitySet,
    ConfigurationError,
    InvalidInput,
    ProviderContext,
    SandboxSpec,
    SupportLevel,
)
from mango_provider_opensandbox import OpenSandboxProvider, plugin, read_settings
from mango_provider_opensandbox.resources import cpu_limit, memory_limit, resource_limits
from mango_provider_opensandbox.settings import SETTINGS, open_opensandbox_provider


def test_plugin_module_holds_only_hookimpls() -> None:
    """plugin.py exposes the marker and the two hooks, nothing else."""
    assert plugin.__all__ == [
        "hookimpl",
        "mango_register_conformance_targets",
        "mango_register_providers",
    ]


def test_public_names_are_sorted_and_exported() -> None:
    """The package ``__all__`` is sorted and every name in it exists."""
    names = mango_provider_opensandbox.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(mango_provider_opensandbox, name)


def test_registration_is_preview_with_limited_network() -> None:
    """``opensandbox`` registers through the entry point: preview, packages, limited network,
    the file API, background processes, pause and exposed ports."""
    host = load_plugins()
    registration = host.providers().get("opensandbox")
    assert registration.support_level is SupportLevel.PREVIEW
    assert registration.capabilities == CapabilitySet.of(
        Capability.PACKAGE_SETUP,
        Capability.LIMITED_NETWORK,
        Capability.FILE_API,
        Capability.BACKGROUND_PROCESSES,
        Capability.PAUSE,
        Capability.EXPOSED_PORTS,
    )
    assert {setting.env for setting in registration.settings} >= {
        "OPEN_SANDBOX_DOMAIN",
        "OPEN_SANDBOX_API_KEY",
        "OPEN_SANDBOX_USE_SERVER_PROXY",
    }
    assert host.conformance_targets().get("opensandbox").provider == "opensandbox"
    # limited-network is this provider's alone among the installed ones.
    registry = host.providers()
    others = [
        name
        for name in registry.names()
        if Capability.LIMITED_NETWORK in registry.capabilities(name)
    ]
    assert others == ["opensandbox"]


def test_mango_providers_lists_it_as_preview() -> None:
    """The command line shows the provider and its support level."""
    listing = subprocess.run(
        [str(Path(sys.executable).with_name("mango")), "providers"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(line for line in listing.splitlines() if "opensandbox" in line)
    assert "preview" in line
    assert "limited-network" in line


def test_settings_defaults_and_environment() -> None:
    """Defaults, a scheme-less domain, the proxy switch and the image fallbacks."""
    settings = read_settings({"OPEN_SANDBOX_DOMAIN": "sandbox.example.test:8080/"})
    assert settings.base_url == "http://sandbox.example.test:8080"
    assert settings.api_key is None
    assert settings.server_proxy is False
    assert settings.image == "python:3.12-slim"
    assert (settings.cpu, settings.memory) == ("1", "2Gi")
    settings = read_settings(
        {
            "OPEN_SANDBOX_DOMAIN": "https://sandbox.example.test",
            "OPEN_SANDBOX_USE_SERVER_PROXY": "TRUE",
            "MANGO_SANDBOX_IMAGE": "busybox:latest",
            "OPEN_SANDBOX_MEMORY": "512m",
            "OPEN_SANDBOX_REQUEST_TIMEOUT": "5",
            "MANGO_MAX_READ_BYTES": "4096",
        }
    )
    assert settings.base_url == "https://sandbox.example.test"
    assert settings.server_proxy is True
    assert settings.image == "busybox:latest"
    assert settings.memory == "512Mi"
    assert (settings.request_timeout, settings.max_read_bytes) == (5.0, 4096)
    assert len(SETTINGS) == len({setting.env for setting in SETTINGS})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OPEN_SANDBOX_USE_SERVER_PROXY", "maybe"),
        ("OPEN_SANDBOX_PROTOCOL", "ftp"),
        ("OPEN_SANDBOX_MEMORY", "lots"),
        ("OPEN_SANDBOX_REQUEST_TIMEOUT", "-1"),
        ("MANGO_MAX_READ_BYTES", "1.5"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    """A bad value fails at start-up with the variable's name."""
    with pytest.raises(ConfigurationError, match=name):
        read_settings({"OPEN_SANDBOX_DOMAIN": "sandbox.example.test", name: value})


def test_factory_is_lazy_and_takes_the_namespace() -> None:
    """The factory does no I/O and builds the provider in the deployment's namespace."""
    provider = open_opensandbox_provider(
        ProviderContext(
            namespace="deploy-a", environ={"OPEN_SANDBOX_DOMAIN": "sandbox.example.test"}
        )
    )
    assert isinstance(provider, OpenSandboxProvider)
    assert provider.ownership.namespace == "deploy-a"
    assert provider.capabilities == CapabilitySet.of(
        Capability.PACKAGE_SETUP,
        Capability.LIMITED_NETWORK,
        Capability.FILE_API,
        Capability.BACKGROUND_PROCESSES,
        Capability.PAUSE,
        Capability.EXPOSED_PORTS,
    )


def test_resource_limits() -> None:
    """Spec limits win; Docker-style memory sizes become binary units; CPUs become millicores."""
    assert cpu_limit(2) == "2"
    assert cpu_limit(0.5) == "500m"
    assert memory_limit("512m") == "512Mi"
    assert memory_limit("2Gi") == "2Gi"
    assert memory_limit("1g") == "1Gi"
    assert memory_limit("1048576") == "1048576"
    for bad in ("", "lots", "-1m", "5x"):
        with pytest.raises(InvalidInput):
            memory_limit(bad)
    spec = SandboxSpec(cpus=1.5, memory="256m")
    assert resource_limits(spec, cpu="1", memory="2Gi") == {"cpu": "1500m", "memory": "256Mi"}
    assert resource_limits(SandboxSpec(), cpu="4", memory="8Gi") == {"cpu": "4", "memory": "8Gi"}


@pytest.mark.parametrize(
    ("memory", "cpus", "expected"),
    [
        ("2g", 2, {"cpu": "2", "memory": "2Gi"}),  # Docker's spelling, as Kubernetes spells it
        ("1.5GiB", "500m", {"cpu": "500m", "memory": "1.5Gi"}),
        ("64MB", 0.25, {"cpu": "250m", "memory": "64Mi"}),
        (1 << 30, "1.5", {"cpu": "1500m", "memory": "1073741824"}),  # bytes stay bytes
    ],
)
def test_the_parsed_spec_becomes_kubernetes_quantities(
    memory: str | int, cpus: float | str, expected: dict[str, str]
) -> None:
    """Any spelling of mango's one grammar reaches the server as a quantity of the same size."""
    spec = SandboxSpec(memory=memory, cpus=cpus)  # type: ignore[arg-type]
    limits = resource_limits(spec, cpu=None, memory=None)
    assert limits == expected
    assert SandboxSpec(memory=limits["memory"]).memory_bytes == spec.memory_bytes


def test_cpu_setting_follows_the_grammar() -> None:
    """OPEN_SANDBOX_CPU is read by the CPU grammar and sent as the server spells it."""
    base = {"OPEN_SANDBOX_DOMAIN": "sandbox.example.test"}
    assert read_settings({**base, "OPEN_SANDBOX_CPU": "1.5"}).cpu == "1500m"
    assert read_settings({**base, "OPEN_SANDBOX_CPU": "250m"}).cpu == "250m"
    assert read_settings({**base, "OPEN_SANDBOX_MEMORY": "2g"}).memory == "2Gi"
    for bad in ("lots", "0", "2000"):
        with pytest.raises(ConfigurationError, match="OPEN_SANDBOX_CPU"):
            read_settings({**base, "OPEN_SANDBOX_CPU": bad})
