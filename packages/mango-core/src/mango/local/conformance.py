"""The offline conformance target of the local provider."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from mango.local.provider import LocalProvider
from mango.provider.ownership import derived_namespace

__all__ = ["open_conformance_provider"]


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[LocalProvider]:
    """Yield a fresh :class:`LocalProvider` over ``scratch_dir / "sandboxes"``.

    Entering again with the same directory gives a provider that attaches to
    what earlier ones created, as a restarted worker would. The namespace is
    derived from ``scratch_dir``: fixed for the run, different between runs.
    """
    provider = LocalProvider(
        Path(scratch_dir) / "sandboxes",
        namespace=derived_namespace("conformance", os.fspath(scratch_dir)),
    )
    try:
        yield provider
    finally:
        await provider.aclose()
