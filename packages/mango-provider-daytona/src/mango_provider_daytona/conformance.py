"""The offline conformance target of the Daytona provider: its fake, one per scratch directory.

The fake runs as long as the scratch directory's run: the first entry starts
it (in the current event loop), later entries give fresh providers over the
same fake, as a restarted worker would see the same Daytona account. The
testbed names a free host port for the ``exposed-ports`` check: the fake's
sandboxes are host processes, and its preview proxy sends a link's requests
to ``127.0.0.1:{port}``.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from mango.provider import ConformanceTestbed, PortTestbed
from mango.provider.ownership import derived_namespace
from mango_provider_daytona.fake import FAKE_API_KEY, open_fake_daytona
from mango_provider_daytona.provider import DaytonaProvider

__all__ = ["free_port", "open_conformance_provider", "open_conformance_testbed"]

_FAKES: dict[str, str] = {}
_STACKS: dict[str, contextlib.AsyncExitStack] = {}


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[DaytonaProvider]:
    """Yield a fresh :class:`DaytonaProvider` on a fake Daytona serving ``scratch_dir``.

    The fake is started on the first entry for ``scratch_dir`` and stopped
    when the outermost entry exits; nested entries (simulated restarts) share it.
    """
    key = os.fspath(scratch_dir)  # the harness passes the same path on every entry
    owner = key not in _FAKES
    if owner:
        stack = contextlib.AsyncExitStack()
        service, _fake = await stack.enter_async_context(
            open_fake_daytona(Path(scratch_dir) / "daytona-fake")
        )
        _FAKES[key] = service.url
        _STACKS[key] = stack
    provider = DaytonaProvider(
        _FAKES[key],
        FAKE_API_KEY,
        namespace=derived_namespace("conformance", key),
        poll_interval=0.05,
    )
    try:
        yield provider
    finally:
        await provider.aclose()
        if owner:
            _FAKES.pop(key, None)
            await _STACKS.pop(key).aclose()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def open_conformance_testbed(_scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    """A free host port for the ``exposed-ports`` check (nothing else is offered)."""
    yield ConformanceTestbed(ports=PortTestbed(port=free_port()))
