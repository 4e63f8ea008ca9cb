"""The test module ``mango-conformance run NAME`` hands to pytest.

It runs the whole suite against the offline target that an installed plugin
registered under the name in ``MANGO_CONFORMANCE_TARGET``. Without that
variable it skips itself, so collecting it by accident does nothing.
"""

from __future__ import annotations

import os

import pytest

from mango.plugins import load_plugins
from mango.provider import ConformanceTarget
from mango_conformance.options import SuiteOptions
from mango_conformance.suite import ProviderSuite

TARGET_ENV = "MANGO_CONFORMANCE_TARGET"
"""Names the target to run; set by the command line."""

_NAME = os.environ.get(TARGET_ENV, "")
if not _NAME:
    pytest.skip(f"{TARGET_ENV} is not set", allow_module_level=True)


class TestConformanceTarget(ProviderSuite):
    """The suite against the target named by ``MANGO_CONFORMANCE_TARGET``."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        """The plugin's registered offline target."""
        return load_plugins().conformance_targets().get(_NAME)

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        """Defaults, with the registration's capabilities and quirks (if it is registered)."""
        providers = load_plugins().providers()
        if _NAME not in providers.names():
            return SuiteOptions()
        return SuiteOptions.for_registration(providers.get(_NAME))
