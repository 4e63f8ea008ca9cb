"""Plugin host and provider registry: typed, lazy, fail-closed."""

from __future__ import annotations

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
from mango.plugins import load_plugins

hookimpl = pluggy.HookimplMarker("mango")


class _Provider:
    def __init__(self, name: str, capabilities: CapabilitySet) -> None:
        self.name = name
        self.capabilities = capabilities


CONTEXT = ProviderContext(namespace="ns-test")


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


def test_broken_entry_point_plugin_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin that fails to import names the way around it."""

    def explode(self: pluggy.PluginManager, group: str, name: str | None = None) -> int:
        raise ImportError("no module named 'vendor_sdk'")

    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints", explode)
    with pytest.raises(ConfigurationError) as info:
        load_plugins(entry_points=True)
    assert "vendor_sdk" in str(info.value)
    assert "MANGO_DISABLE_PLUGINS=1" in (info.value.hint or "")
    assert load_plugins(entry_points=False).providers().names() == ("local",)
