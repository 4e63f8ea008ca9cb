"""The fake service: an aiohttp application on 127.0.0.1 with fake sandboxes and faults."""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Protocol, TextIO

import attrs
from aiohttp import web

from mango.domain.errors import InvalidInput, ProviderUnavailable
from mango.domain.values import SandboxSpec
from mango.fakes.faults import Faults
from mango.fakes.sandboxes import FakeSandboxes

__all__ = [
    "MAX_REQUEST_BYTES",
    "SERVICE_KEY",
    "UNCAPPED_OUTPUT",
    "Announce",
    "FakeService",
    "RoutesFactory",
    "Servable",
    "run_standalone",
    "serve",
]

MAX_REQUEST_BYTES = 1 << 30
"""Largest request body a fake accepts (uploads of large files must work)."""
UNCAPPED_OUTPUT = 1 << 62
"""A ``max_output_bytes`` for a vendor daemon that streams everything a command prints
(the client, mango, applies its own cap)."""

SERVICE_KEY: web.AppKey[FakeService] = web.AppKey("mango_fake_service")
"""Where a handler finds its service: ``request.app[SERVICE_KEY]``."""

RoutesFactory = Callable[["FakeService"], Iterable[web.AbstractRouteDef]]
"""Builds a vendor fake's routes; the handlers close over the service they get."""
Announce = Callable[[str], Iterable[str]]
"""The lines a standalone fake prints after its URL (given the URL), such as its settings."""


class Servable(Protocol):
    """What :func:`serve` runs: a :class:`FakeService`, or a fake built around one."""

    @property
    def url(self) -> str:
        """Where it listens, once started."""

    async def __aenter__(self) -> object:
        """Start serving."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop serving."""


@attrs.define(eq=False)
class FakeService:
    """A vendor fake served over plain HTTP/1.1 on an ephemeral 127.0.0.1 port.

    ``routes`` builds the vendor's routes from this service (its
    :attr:`sandboxes` registry and :attr:`faults`). Use it as
    ``async with FakeService(tmp_path, routes) as service: service.url``;
    stopping deletes every sandbox (killing its commands) and releases held
    requests. ``spec`` is the default spec of the fake sandboxes and
    ``max_output_bytes`` their per-stream cap (a vendor whose service streams
    everything raises it). A client that disconnects cancels its handler, as
    a Go server's request context does, so a streamed command ends with its
    client.
    """

    scratch_dir: Path = attrs.field(converter=Path)
    routes: RoutesFactory
    name: str = "fake"
    host: str = "127.0.0.1"
    port: int = 0
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)
    max_output_bytes: int = 1 << 20
    """Per-stream cap of the fake sandboxes' commands (a vendor daemon that buffers more
    than mango's cap, because it wraps the output, needs a larger one)."""
    faults: Faults = attrs.field(factory=Faults)
    sandboxes: FakeSandboxes = attrs.field(init=False)
    _runner: web.AppRunner | None = attrs.field(default=None, init=False, repr=False)
    _url: str | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.sandboxes = FakeSandboxes(
            self.scratch_dir / "sandboxes", spec=self.spec, max_output_bytes=self.max_output_bytes
        )

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` once started."""
        if self._url is None:
            raise InvalidInput(f"fake service {self.name!r} is not running")
        return self._url

    def build_app(self) -> web.Application:
        """The aiohttp application: fault middleware first, then the vendor routes."""
        app = web.Application(
            middlewares=[self.faults.middleware], client_max_size=MAX_REQUEST_BYTES
        )
        app[SERVICE_KEY] = self
        app.add_routes(list(self.routes(self)))
        return app

    async def start(self) -> str:
        """Bind the port and serve; return :attr:`url`."""
        if self._runner is not None:
            return self.url
        self.faults.rearm()
        runner = web.AppRunner(
            self.build_app(), access_log=None, shutdown_timeout=1.0, handler_cancellation=True
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ProviderUnavailable(f"fake service {self.name!r} cannot listen: {exc}") from exc
        # Port 0 asked the kernel for a free port; the runner knows which one it got.
        host, port = runner.addresses[0][:2]
        self._runner = runner
        self._url = f"http://{host}:{port}"
        return self._url

    async def stop(self) -> None:
        """Delete every sandbox, release held requests, close the port. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.faults.release()
        await self.sandboxes.close()
        await runner.cleanup()
        self._url = None

    async def __aenter__(self) -> FakeService:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve(
    service: Servable, *, out: TextIO = sys.stdout, announce: Announce | None = None
) -> None:
    """Run ``service`` until SIGTERM or SIGINT, printing its URL on one line first.

    For "run mango against a running fake": a vendor fake's ``__main__``
    calls this, and the caller reads the first line of output. The lines of
    ``announce(url)``, if given, follow the URL.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signo in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signo, stop.set)
    try:
        async with service:
            print(service.url, file=out, flush=True)
            for line in announce(service.url) if announce is not None else ():
                print(line, file=out, flush=True)
            await stop.wait()
    finally:
        for signo in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signo)


def run_standalone(
    build: Callable[[Path], Servable],
    scratch: str | Path | None = None,
    *,
    prefix: str = "mango-fake-",
    announce: Announce | None = None,
) -> None:
    """A fake's ``__main__``: serve ``build(scratch)`` with :func:`serve` until a signal.

    Without ``scratch`` the sandboxes live in a temporary directory (named
    with ``prefix``) that is removed afterwards.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as default_scratch:
        service = build(Path(scratch or default_scratch))
        asyncio.run(serve(service, announce=announce))
