"""Fixtures of the repository-level tests: freshly built wheels, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import build_workspace


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels and sdists of mango-core, mango-conformance and mango-provider-docker."""
    return build_workspace(tmp_path_factory.mktemp("wheelhouse"))
