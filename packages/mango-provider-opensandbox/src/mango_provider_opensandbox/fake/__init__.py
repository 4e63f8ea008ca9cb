"""A protocol-faithful fake OpenSandbox: lifecycle API, server proxy, execd and egress sidecar.

Built on the scaffold's :class:`~mango.fakes.FakeService` (aiohttp on
127.0.0.1, real local process sandboxes, fault injection). What it speaks,
from the vendor's ``specs/sandbox-lifecycle.yml``, ``specs/execd-api.yaml``,
``specs/egress-api.yaml`` and the execd/egress sources:

* lifecycle under ``/v1`` (and the root): list (``metadata`` filter, pages),
  create (``202``, state ``Pending``; ``Running`` from the first ``GET``),
  get, delete (``204``; ``404`` when gone), pause/resume (``202``, then
  ``Pausing``/``Paused`` or ``Resuming``/``Running``; ``409`` from any other
  state) as the server's Docker runtime pauses (every process of the sandbox
  stopped, its requests and event streams held until the resume), endpoints
  with ``use_server_proxy``; ``OPEN-SANDBOX-API-KEY`` required when the fake has a
  key (``401`` with ``MISSING_API_KEY``/``INVALID_API_KEY`` otherwise);
* the server proxy ``/v1/sandboxes/{id}/proxy/{port}/...`` (no API key
  needed, as on the server) and direct endpoints ``/direct/{id}/{port}/...``
  that want the endpoint's ``X-EXECD-ACCESS-TOKEN``; a port other than
  execd's and the egress sidecar's is forwarded, through either, to the
  server the sandbox runs on ``127.0.0.1:{port}`` (execd's ``/proxy/{port}``);
* execd: ``/ping``, ``POST /command`` as execd streams it (bare JSON frames
  separated by a blank line; ``init``, one ``stdout``/``stderr`` event per
  *line with its terminator stripped*, ``ping`` every few seconds, then
  ``error`` with the exit code or ``execution_complete``, then a grace
  period before the stream ends; a command whose sandbox is deleted gets its
  stream cut mid-body with no final event, since execd dies with the
  container), ``DELETE /command?id=`` (interrupt), background commands
  (``"background": true``: started detached in their own process group, with
  ``GET /command/status/{id}`` and ``GET /command/{id}/logs?cursor=``; see
  :mod:`.background`),
  ``files/info`` (links not followed), ``files/upload`` (multipart
  metadata + file, chunked bodies accepted), ``files/download``,
  ``directories``, ``DELETE /files``; ``FILE_NOT_FOUND`` on a missing path;
* the egress sidecar: ``GET``/``PATCH``/``DELETE /policy`` with
  ``OPENSANDBOX-EGRESS-AUTH``, the sidecar's merge rule (incoming first,
  first rule per target wins) and case-insensitive removal.

Paths: a sandbox's file system is emulated per sandbox: ``/workspace`` is
the local sandbox's workspace, any other absolute path lies under a private
``fsroot`` beside it. Commands run as host processes, so absolute paths in a
command line are rewritten for the two prefixes mango uses (``/workspace``
and ``/var/lib/mango``, where they start a word or a quoted string); that is a
limit of the fake, not of the protocol. Commands run with ``bash -c`` (``sh``
without bash), as execd runs them, with the sandbox's image first on their
``PATH`` (:mod:`.image`: an ``apt-get`` that installs from the fake's
``apt_source`` into the sandbox, never the host's) and their HTTP sent
through the egress gateway (:mod:`.gateway`), which enforces the sandbox's
policy. Package managers other than ``apt-get`` would run the host's
programs: give the fake no ``pip``, ``npm``, ... plans.

``python -m mango_provider_opensandbox.fake`` serves one alone (it needs
aiohttp: the ``fake`` extra) and prints the settings that point mango at it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango_provider_opensandbox.fake.execd import LineSplitter
    from mango_provider_opensandbox.fake.server import DEFAULT_FAKE_API_KEY, FakeOpenSandbox

__all__ = ["DEFAULT_FAKE_API_KEY", "FakeOpenSandbox", "LineSplitter"]

_WHERE = {
    "DEFAULT_FAKE_API_KEY": "mango_provider_opensandbox.fake.server",
    "FakeOpenSandbox": "mango_provider_opensandbox.fake.server",
    "LineSplitter": "mango_provider_opensandbox.fake.execd",
}


def __getattr__(name: str) -> Any:
    # Loaded on first use: ``python -m mango_provider_opensandbox.fake`` can then say
    # which extra brings aiohttp instead of failing on the import.
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
