"""The offline conformance target: the provider against its fake server on 127.0.0.1.

Every entry of :func:`open_conformance_provider` with the same scratch
directory (on the same event loop) shares one :class:`FakeOpenSandbox`, so a
provider from a later entry attaches to what earlier ones made (a restarted
worker); the fake stops when the last entry closes. Providers alternate
between the server proxy and direct endpoints, so both data paths are
exercised by the same checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mango.provider.ownership import derived_namespace
from mango_provider_opensandbox.provider import OpenSandboxProvider

if TYPE_CHECKING:
    from mango_provider_opensandbox.fake import FakeOpenSandbox

__all__ = ["open_conformance_provider"]


@attrs.define(eq=False)
class _Shared:
    fake: FakeOpenSandbox
    users: int = 0
    entries: itertools.count[int] = attrs.field(factory=itertools.count)


_RUNNING: dict[tuple[str, int], _Shared] = {}


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[OpenSandboxProvider]:
    """Yield a fresh :class:`OpenSandboxProvider` on the fake of ``scratch_dir``."""
    from mango_provider_opensandbox.fake import FakeOpenSandbox

    key = (os.fspath(scratch_dir), id(asyncio.get_running_loop()))
    shared = _RUNNING.get(key)
    if shared is None:
        fake = FakeOpenSandbox(Path(scratch_dir) / "opensandbox-fake")
        await fake.start()
        shared = _RUNNING[key] = _Shared(fake)
    shared.users += 1
    fake = shared.fake
    provider = OpenSandboxProvider(
        fake.url,
        api_key=fake.api_key,
        namespace=derived_namespace("conformance", os.fspath(scratch_dir)),
        server_proxy=next(shared.entries) % 2 == 0,
    )
    try:
        yield provider
    finally:
        await provider.aclose()
        shared.users -= 1
        if shared.users == 0:
            del _RUNNING[key]
            await fake.stop()
