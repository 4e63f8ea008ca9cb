"""The whole suite against mango-core's local provider, through its registered target."""

from __future__ import annotations

import pytest

from mango.domain.registry import ConformanceTarget
from mango.plugins import load_plugins
from mango_conformance import ProviderSuite, SuiteOptions


class TestLocalProvider(ProviderSuite):
    """The reference provider passes every check."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return load_plugins(entry_points=False).conformance_targets().get("local")

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        registration = load_plugins(entry_points=False).providers().get("local")
        return SuiteOptions(declared_capabilities=registration.capabilities)
