"""The fake E2B service: the offline conformance target of the ``e2b`` and ``cube`` providers.

``E2BFakeService.create(scratch_dir, FakeConfig(...))`` serves the control
plane and envd on one 127.0.0.1 port; ``python -m mango_provider_e2b.fake
[--cube]`` runs one until interrupted. Modules: :mod:`.config` (modes and
settings), :mod:`.service` (the sandboxes' lifecycle and the test
controls), :mod:`.api` (control-plane routes), :mod:`.envd` (envd routes),
:mod:`.processes` (envd's processes), :mod:`.ports` (a sandbox's other ports),
:mod:`.common` (what the routes share).

It speaks the wire protocol the official ``e2b`` SDK speaks (tests drive it
with that SDK) and the one mango's provider speaks; where they could
disagree, the SDK decides. Sandboxes are the scaffold's (:mod:`mango.fakes`: real
local process sandboxes): the workspace ``/workspace`` is a host directory,
commands are real processes (:mod:`mango_provider_e2b.fake.processes`), and
absolute paths under ``/workspace`` in a command's arguments, its cwd or a
file call are mapped onto that directory; those under ``/var/lib/mango``
(where mango keeps its background processes' files) onto a private
directory beside it. That is all of a sandbox's file system the fake has.
Processes: ``Start`` (with a ``tag``), ``Connect`` by pid or tag (the output
from then on; envd replays nothing), ``List``, ``SendInput``, ``CloseStdin``,
``SendSignal``; a process runs on when its stream's client leaves, and
``FakeConfig.connect_deadline`` cuts ``Connect`` streams that outlive it, as
E2B's edge does (a reconnect that fails after two minutes).

Routing of envd calls: by the ``E2b-Sandbox-Id`` header (the SDK with one
``sandbox_url``; mango with ``E2B_SANDBOX_URL``) or by the virtual host
``49983-<id>.<domain>`` in ``Host`` (mango's Cube proxy-node routing). A
request whose ``E2b-Sandbox-Port`` names another port than envd's goes,
before any route, to the server its sandbox runs (:mod:`.ports`: the
client-proxy's header routing).

Modes (:class:`FakeConfig`): ``e2b`` authenticates the control plane with
``X-API-Key``; ``cube`` with ``Authorization: Bearer`` (or ``X-API-Key``, as
CubeAPI does), requires the key on the data plane too, and names its domain
in every sandbox answer. Lifecycle: a sandbox's ``timeout`` runs from create,
connect or ``/timeout``; when it passes, the sandbox pauses (``autoPause``) or
is deleted. A paused or deleted sandbox's data plane answers as E2B's proxy
does: 502 ``The sandbox was not found``; a deleted one's ``GET`` is a 404, and
the process streams running in it are cut (no ``end`` event), as when E2B
kills the sandbox's VM with envd inside.
"""

from __future__ import annotations

from mango_provider_e2b.fake.config import (
    CUBE_MODE,
    E2B_MODE,
    WORKSPACE,
    FakeConfig,
    mango_settings,
)
from mango_provider_e2b.fake.processes import FakeProcess
from mango_provider_e2b.fake.service import E2BFakeService

__all__ = [
    "CUBE_MODE",
    "E2B_MODE",
    "WORKSPACE",
    "E2BFakeService",
    "FakeConfig",
    "FakeProcess",
    "mango_settings",
]
