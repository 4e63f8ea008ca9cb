"""Plugin host and provider registry: typed, lazy, fail-closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pluggy
import pytest

from mango.domain import (
    Capability,
    CapabilitySet,
    ConfigurationError,
    InvalidInput,
    ProviderRegistration,
    SupportLevel,
    UnknownProvider,
)
from mango.domain.registry import ProviderContext, ProviderRegistry
from mango.plugins import DISABLE_PLUGINS_ENV, disabled_plugins, load_plugins

hookimpl = pluggy.HookimplMarker("mango")


class _Provider:
    def __init__(self, name: str, capabilities: CapabilitySet) -> None:
        self.name = name
        self.capabilities = capabilities


CONTEXT = ProviderContext(namespace="ns-test", environ={})


def _registration(
    name: str, factory: Any, capabilities: CapabilitySet | None = None
) -> ProviderRegistration:
    return ProviderRegistration(
        name=name,
        capabilities=capabilities or CapabilitySet(),
        support_level=SupportLevel.PREVIEW,
        settings=(),
        factory=factory,
    )


def test_registration_is_lazy_and_open_checks_it() -> None:
    """Capabilities are readable without the factory; opening checks name and capabilities."""
    calls: list[str] = []

    def factory(context: ProviderContext) -> Any:
        assert context == CONTEXT
        calls.append("built")
        return _Provider("fake", CapabilitySet.of(Capability.PACKAGE_SETUP))

    registry = ProviderRegistry()
    registry.add(_registration("fake", factory))
    assert registry.capabilities("fake") == CapabilitySet()
    assert calls == []
    with pytest.raises(ConfigurationError, match=r"registered with capabilities \[none\]"):
        registry.open("fake", CONTEXT)
    assert calls == ["built"]

    renamed = ProviderRegistry()
    renamed.add(_registration("fake", lambda _context: _Provider("other", CapabilitySet())))
    with pytest.raises(ConfigurationError, match="reports the name 'other'"):
        renamed.open("fake", CONTEXT)


def test_unknown_and_duplicate_names() -> None:
    """Unknown names list what is installed; duplicates and bad names are refused."""
    registry = ProviderRegistry()
    registry.add(_registration("b", lambda _context: None))
    registry.add(_registration("a", lambda _context: None))
    with pytest.raises(UnknownProvider) as info:
        registry.open("c", CONTEXT)
    assert info.value.available == ("a", "b")
    assert "installed: a, b" in str(info.value)
    with pytest.raises(ConfigurationError, match="registered twice"):
        registry.add(_registration("a", lambda _context: None))
    with pytest.raises(InvalidInput):
        _registration("Not-Lowercase", lambda _context: None)
    with pytest.raises(InvalidInput):
        registry.add("local")  # type: ignore[arg-type]


def test_extra_plugins_register_through_the_hook() -> None:
    """A plugin object adds a provider beside the built-in local one; a fresh host each time."""

    class Plugin:
        @hookimpl
        def mango_register_providers(self, registry: ProviderRegistry) -> None:
            registry.add(
                _registration("extra", lambda _context: _Provider("extra", CapabilitySet()))
            )

    host = load_plugins(extra=[Plugin()], entry_points=False)
    assert host.providers().names() == ("extra", "local")
    assert load_plugins(entry_points=False).providers().names() == ("local",)


def _install_plugin(site: Path, dist: str, name: str, module_source: str) -> None:
    """Make ``dist`` importable from ``site`` with one ``mango`` entry point ``name``."""
    module = f"{dist.replace('-', '_')}_plugin"
    (site / f"{module}.py").write_text(module_source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[mango]\n{name} = {module}\n")


GOOD_PLUGIN = """
import pluggy
from mango.domain.capabilities import CapabilitySet
from mango.domain.registry import ProviderRegistration, SupportLevel

hookimpl = pluggy.HookimplMarker("mango")


@hookimpl
def mango_register_providers(registry):
    registry.add(ProviderRegistration(
        name="goodbox", capabilities=CapabilitySet(), support_level=SupportLevel.PREVIEW,
        settings=(), factory=lambda context: None,
    ))
"""


def test_broken_plugin_is_named_and_can_be_switched_off_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error names the entry point and distribution; disabling it by name keeps the rest."""
    _install_plugin(tmp_path, "acme-broken", "brokenbox", "import vendor_sdk_that_is_missing\n")
    _install_plugin(tmp_path, "acme-good", "goodbox", GOOD_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as info:
        load_plugins(environ={})
    message = str(info.value)
    assert "'brokenbox'" in message
    assert "acme-broken" in message
    assert "vendor_sdk_that_is_missing" in message
    assert f"{DISABLE_PLUGINS_ENV}=brokenbox" in (info.value.hint or "")
    names = load_plugins(environ={DISABLE_PLUGINS_ENV: "brokenbox"}).providers().names()
    assert "goodbox" in names
    assert "local" in names
    assert load_plugins(environ={DISABLE_PLUGINS_ENV: "1"}).providers().names() == ("local",)


def test_disabled_plugins_setting() -> None:
    """1/true/yes/all switch off every external plugin; otherwise a list of names."""
    for value in ("1", "true", "YES", "all"):
        assert disabled_plugins({DISABLE_PLUGINS_ENV: value}) is None
    assert disabled_plugins({}) == frozenset()
    assert disabled_plugins({DISABLE_PLUGINS_ENV: " e2b, daytona ,"}) == {"e2b", "daytona"}


LIGHT_MODULES = frozenset(
    {"", ".plugin", ".settings", ".layout", ".limits", ".options", ".resources"}
)
"""What a provider distribution may load to register: its package, plugin and settings, and
the constant modules they build the registration from; never its adapter."""
HEAVY_LIBRARIES = frozenset({"httpx", "stamina", "aiodocker", "aiohttp"})
REMOTE_PROVIDERS = {"cube", "daytona", "docker", "e2b", "opensandbox"}

_SELECT_LOCAL = """
import json, sys
from mango.config import Settings
from mango.domain.registry import ProviderContext
from mango.runtime import select_provider

settings = Settings.from_env({"MANGO_STATE_DIR": sys.argv[1], "MANGO_SANDBOX": "local"})
registry, registration = select_provider(settings)
listing = [(r.name, [s.env for s in r.settings]) for r in registry]  # as 'mango providers'
provider = registry.open("local", ProviderContext(namespace="ns-lazy", environ=settings.environ))
seen = {"names": registry.names(), "opened": provider.name, "modules": sorted(sys.modules)}
print(json.dumps(seen))
"""


def test_selecting_local_imports_no_remote_adapter_httpx_or_stamina(tmp_path: Path) -> None:
    """In a fresh process, every installed plugin registers and local opens; no adapter loads."""
    done = subprocess.run(
        [sys.executable, "-c", _SELECT_LOCAL, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={key: value for key, value in os.environ.items() if key != DISABLE_PLUGINS_ENV},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["opened"] == "local"
    assert set(seen["names"]) >= REMOTE_PROVIDERS, "the workspace's provider plugins are missing"
    modules: list[str] = seen["modules"]
    assert sorted(name for name in modules if name.split(".")[0] in HEAVY_LIBRARIES) == []
    assert "mango.provider.http" not in modules
    loaded = {name for name in modules if name.startswith("mango_provider_")}
    for provider in REMOTE_PROVIDERS:
        assert f"mango_provider_{provider}.plugin" in loaded
    adapters = sorted(
        name for name in loaded if "".join(name.partition(".")[1:]) not in LIGHT_MODULES
    )
    assert adapters == []
