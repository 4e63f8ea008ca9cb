"""pytest11 entry point: registers options and markers only (inert until used)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite options."""

