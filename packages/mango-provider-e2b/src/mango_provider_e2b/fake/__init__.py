"""The fake E2B service: the offline conformance target of the ``e2b`` and ``cube`` providers.

``E2BFakeService.create(scratch_dir, FakeConfig(...))`` serves the control
plane and envd on one 127.0.0.1 port (see :mod:`mango_provider_e2b.fake.service`);
``python -m mango_provider_e2b.fake [--cube]`` runs one until interrupted.
"""

from __future__ import annotations

from mango_provider_e2b.fake.processes import FakeProcess
from mango_provider_e2b.fake.service import (
    CUBE_MODE,
    E2B_MODE,
    WORKSPACE,
    E2BFakeService,
    FakeConfig,
    mango_settings,
)

__all__ = [
    "CUBE_MODE",
    "E2B_MODE",
    "WORKSPACE",
    "E2BFakeService",
    "FakeConfig",
    "FakeProcess",
    "mango_settings",
]
