"""The local provider's plugin registration, settings and conformance target."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import platformdirs
import pluggy
import pytest

from mango.config import ROOT_STATE_DIR, state_dir
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import ConfigurationError
from mango.domain.registry import (
    ConformanceTargetRegistry,
    ProviderContext,
    ProviderRegistry,
    SupportLevel,
)
from mango.domain.values import SandboxSpec
from mango.local import DEFAULT_MAX_OUTPUT_BYTES, LocalProvider, read_local_settings
from mango.local import plugin as local_plugin
from mango.local.settings import (
    MAX_OUTPUT_BYTES_ENV,
    SANDBOX_DIR_ENV,
    STATE_DIR_ENV,
    open_local_provider,
)
from mango.plugins import load_plugins

CONTEXT = ProviderContext(namespace="ns-test", environ={})


def registered() -> ProviderRegistry:
    registry = ProviderRegistry()
    local_plugin.mango_register_providers(registry)
    return registry


def test_plugin_module_holds_only_hookimpls() -> None:
    """plugin.py exposes the marker and the two hooks, nothing else."""
    assert local_plugin.__all__ == [
        "hookimpl",
        "mango_register_conformance_targets",
        "mango_register_providers",
    ]
    assert isinstance(local_plugin.hookimpl, pluggy.HookimplMarker)
    assert local_plugin.hookimpl.project_name == "mango"


def test_registration_is_admission_safe() -> None:
    """The registration declares name, the file API and background processes, development level
    and settings."""
    registration = registered().get("local")
    assert registration.capabilities == CapabilitySet.of(
        Capability.FILE_API, Capability.BACKGROUND_PROCESSES
    )
    assert registration.support_level is SupportLevel.DEVELOPMENT
    assert [setting.env for setting in registration.settings] == [
        SANDBOX_DIR_ENV,
        MAX_OUTPUT_BYTES_ENV,
        "MANGO_MAX_READ_BYTES",
        "MANGO_MAX_PROCESS_LOG_BYTES",
    ]
    assert not any(setting.secret for setting in registration.settings)
    assert "NOT an isolation boundary" in registration.description


def test_builtin_plugin_is_loaded_by_the_host() -> None:
    """The plugin host finds the local provider without entry points."""
    host = load_plugins(entry_points=False)
    assert "local" in host.providers().names()
    assert "local" in host.conformance_targets().names()


def test_factory_reads_settings_only_when_opened(tmp_path: Path) -> None:
    """A bad setting does not break registration, only opening the provider."""
    registry = registered()
    with pytest.raises(ConfigurationError, match=MAX_OUTPUT_BYTES_ENV):
        registry.open("local", attrs.evolve(CONTEXT, environ={MAX_OUTPUT_BYTES_ENV: "lots"}))
    environ = {MAX_OUTPUT_BYTES_ENV: "4096", SANDBOX_DIR_ENV: str(tmp_path / "boxes")}
    provider = registry.open("local", attrs.evolve(CONTEXT, environ=environ))
    assert isinstance(provider, LocalProvider)
    assert provider.base_dir == tmp_path / "boxes"
    assert provider.max_output_bytes == 4096
    assert provider.namespace == CONTEXT.namespace


def test_settings_defaults_to_platform_state_dir() -> None:
    """With nothing set, sandboxes live under mango's default state directory."""
    settings = read_local_settings({})
    assert settings.sandbox_dir == state_dir({}) / "sandboxes"
    expected = ROOT_STATE_DIR if os.geteuid() == 0 else platformdirs.user_state_path("mango")
    assert state_dir({}) == expected
    assert settings.max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES


def test_settings_state_dir_and_override(tmp_path: Path) -> None:
    """MANGO_STATE_DIR moves the default; MANGO_LOCAL_SANDBOX_DIR wins over it."""
    state = str(tmp_path / "state")
    assert read_local_settings({STATE_DIR_ENV: state}).sandbox_dir == Path(state) / "sandboxes"
    explicit = str(tmp_path / "explicit")
    settings = read_local_settings({STATE_DIR_ENV: state, SANDBOX_DIR_ENV: explicit})
    assert settings.sandbox_dir == Path(explicit)


def test_empty_values_count_as_unset(tmp_path: Path) -> None:
    """Empty variables fall back to the defaults."""
    state = str(tmp_path / "state")
    settings = read_local_settings(
        {SANDBOX_DIR_ENV: "", MAX_OUTPUT_BYTES_ENV: "", STATE_DIR_ENV: state}
    )
    assert settings.sandbox_dir == Path(state) / "sandboxes"
    assert settings.max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "abc", "1e6", "0x10"])
def test_bad_max_output_bytes(value: str) -> None:
    """A cap that is not a positive integer is a ConfigurationError naming the variable."""
    with pytest.raises(ConfigurationError, match=MAX_OUTPUT_BYTES_ENV):
        read_local_settings({MAX_OUTPUT_BYTES_ENV: value})


@pytest.mark.parametrize("name", [SANDBOX_DIR_ENV, STATE_DIR_ENV])
def test_relative_directories_are_refused(name: str) -> None:
    """A relative directory would move with the cwd, so it is refused."""
    with pytest.raises(ConfigurationError, match=name):
        read_local_settings({name: "relative/dir"})


def test_open_local_provider_from_mapping(tmp_path: Path) -> None:
    """open_local_provider builds the provider from the given environment."""
    provider = open_local_provider(
        attrs.evolve(
            CONTEXT, environ={SANDBOX_DIR_ENV: str(tmp_path), MAX_OUTPUT_BYTES_ENV: " 123 "}
        )
    )
    assert provider.base_dir == tmp_path
    assert provider.max_output_bytes == 123
    assert provider.namespace == "ns-test"


async def test_conformance_target_simulates_restarts(tmp_path: Path) -> None:
    """Entering the target twice on one scratch dir gives providers that share sandboxes."""
    registry = ConformanceTargetRegistry()
    local_plugin.mango_register_conformance_targets(registry)
    target = registry.get("local")
    async with target.open(tmp_path) as provider:
        assert isinstance(provider, LocalProvider)
        assert provider.base_dir == tmp_path / "sandboxes"
        sandbox = await provider.create("conformance", SandboxSpec())
        await sandbox.write_file("kept", b"yes")
    async with target.open(tmp_path) as fresh:
        assert fresh is not provider
        assert fresh.namespace == provider.namespace
        attached = await fresh.attach("conformance", sandbox.ref, SandboxSpec())
        assert await attached.read_file("kept") == b"yes"
