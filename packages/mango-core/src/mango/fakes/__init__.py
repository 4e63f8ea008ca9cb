"""The scaffold for protocol-faithful vendor fakes (E2B, Cube, OpenSandbox, Daytona).

A vendor fake is a set of aiohttp routes built on :class:`FakeService`. The
service listens on an ephemeral port of 127.0.0.1 and speaks plain HTTP/1.1,
so the vendor's official SDK can drive it; its sandboxes are **real local
process sandboxes** (:mod:`mango.local` under a scratch directory), so exec
and files behave for real; :class:`Faults` lets a test inject failures while
it runs. Sketch::

    def routes(service: FakeService) -> list[web.RouteDef]:
        async def create(request: web.Request) -> web.Response:
            sandbox = await service.sandboxes.create((await request.json())["metadata"])
            return web.json_response({"sandboxID": sandbox.id}, status=201)
        return [web.post("/sandboxes", create)]

    async with FakeService(tmp_path, routes) as service:
        service.faults.fail(503, method="POST", path="/sandboxes")
        ...  # point the SDK at service.url

Why aiohttp.web (one server library for every fake): the server runs inside
the test's own event loop (``AppRunner``/``TCPSite``, no thread, no
subprocess), so tests and server share state without locks; it streams
responses (Connect server-streams, SSE) and accepts chunked request bodies,
which the vendors' SDKs use; and it is already in the dependency tree through
aiodocker. ``serve`` runs a service standalone until SIGTERM/SIGINT, printing
its URL (``run_standalone`` is a fake's whole ``__main__``), and
``python -m mango.fakes MODULE:ROUTES`` does so for any routes factory.

Shared by every vendor fake besides: :mod:`mango.fakes.wire` (RFC 3339
times, label maps, a connection cut as when a daemon dies mid-answer) and
:mod:`mango.fakes.beacons` (a test awaits the moment a command in a fake
sandbox gets somewhere, with no polling) and :mod:`mango.fakes.reaper` (the
processes a fake sandbox started, marked, die with it even after ``setsid``)
and :mod:`mango.fakes.ports` (a preview link's or endpoint's route to a
server a fake sandbox runs on a host port).

Where it stands: above the adapters (its sandboxes are the local
provider's) and below :mod:`mango.plugins`, so it is not part of the
provider surface :mod:`mango.provider`. A provider distribution's fake, and
nothing else of it, imports this package; its adapter imports
:mod:`mango.provider` only (import-linter contracts keep both so). It needs
aiohttp (the ``fake`` extra of mango-core); ``import mango.provider`` does
not import it.
"""

from __future__ import annotations

from mango.fakes.beacons import Beacon, open_beacon
from mango.fakes.faults import Faults, Hostile, RecordedRequest
from mango.fakes.ports import forward_to_port
from mango.fakes.reaper import SANDBOX_MARK, continue_marked, kill_marked, mark, stop_marked
from mango.fakes.sandboxes import FakeSandbox, FakeSandboxes, SandboxPaused, SandboxState
from mango.fakes.service import (
    MAX_REQUEST_BYTES,
    SERVICE_KEY,
    UNCAPPED_OUTPUT,
    Announce,
    FakeService,
    RoutesFactory,
    Servable,
    run_standalone,
    serve,
)
from mango.fakes.wire import cut_connection, is_string_map, rfc3339

__all__ = [
    "MAX_REQUEST_BYTES",
    "SANDBOX_MARK",
    "SERVICE_KEY",
    "UNCAPPED_OUTPUT",
    "Announce",
    "Beacon",
    "FakeSandbox",
    "FakeSandboxes",
    "FakeService",
    "Faults",
    "Hostile",
    "RecordedRequest",
    "RoutesFactory",
    "SandboxPaused",
    "SandboxState",
    "Servable",
    "continue_marked",
    "cut_connection",
    "forward_to_port",
    "is_string_map",
    "kill_marked",
    "mark",
    "open_beacon",
    "rfc3339",
    "run_standalone",
    "serve",
    "stop_marked",
]
