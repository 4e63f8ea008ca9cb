"""tinybox against the whole mango conformance suite."""

from __future__ import annotations

import pytest
from mango_provider_tinybox import open_conformance_provider

import mango_conformance
from mango.provider import DEFAULT_MAX_OUTPUT_BYTES, ConformanceTarget


class TestTinybox(mango_conformance.ProviderSuite):
    """Every check of the suite, against a tinybox under pytest's tmp_path."""

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        return ConformanceTarget(provider="tinybox", open=open_conformance_provider)

    @pytest.fixture
    def conformance_options(self) -> mango_conformance.SuiteOptions:
        return mango_conformance.SuiteOptions(
            output_cap=DEFAULT_MAX_OUTPUT_BYTES,  # then a flood must keep exactly this many bytes
            flood_bytes=1024 * 1024,
        )
