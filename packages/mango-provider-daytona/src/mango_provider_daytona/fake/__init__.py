"""A fake Daytona (API and toolbox) on mango-core's vendor-fake scaffold, :mod:`mango.fakes`.

Protocol-faithful where mango and the official SDK look: the API's
``/sandbox`` routes (get by id or name, create with 409 on a taken name,
start, stop, archive, pause, delete, list by labels with a cursor,
last-activity) and a sandbox's toolbox under ``{toolboxProxyUrl}/{id}``
(``/process/execute`` runs the command text through a shell reading it on
stdin with stdout and stderr merged, as the daemon does, answers 408 when
its timeout kills the process group and a bare 502 when the sandbox is
deleted while the command runs, as the proxies in front of a dead daemon do;
``/files/bulk-upload``, ``/files/bulk-download`` as multipart,
``/files/folder``, ``/files/info`` (following symlinks, like the daemon's
``os.Stat``), ``/user-home-dir``).
Preview links: ``GET /sandbox/{id}/ports/{port}/preview-url`` answers
``{"sandboxId", "url", "token"}`` with a URL under the fake's own address,
whose proxy wants the token in ``X-Daytona-Preview-Token`` (or the API key)
and forwards to the server a sandbox runs (:mod:`.preview`).
The SDK's ``/socket.io`` event channel is not served (404), which the SDK
tolerates by polling.

Every sandbox is a real local process sandbox (the scaffold's):
its "home directory" is the local workspace on this host, so absolute paths
the toolbox receives are host paths. File routes refuse paths outside the
sandbox's home and the wrapper's ``/tmp`` directories (a fake must never
write elsewhere on the test host).

Test hooks: :meth:`DaytonaFake.set_state` (stop, archive or pause behind
mango's back), :attr:`DaytonaFake.start_polls` (how many polls a start takes),
and the service's :class:`~mango.fakes.Faults` and
``sandboxes.delete`` (a sandbox deleted behind mango's back).

Modules: :mod:`.state` (the deployment's sandboxes, names and states),
:mod:`.api` (the API routes), :mod:`.toolbox` (a sandbox's toolbox routes),
:mod:`.preview` (preview links and their proxy),
:mod:`.server` (:class:`DaytonaFake` and serving it); ``python -m
mango_provider_daytona.fake [SCRATCH]`` serves one alone until SIGTERM.
"""

from __future__ import annotations

from mango_provider_daytona.fake.server import DaytonaFake, open_fake_daytona, routes
from mango_provider_daytona.fake.state import (
    FAKE_API_KEY,
    FAKE_MAX_OUTPUT_BYTES,
    FAKE_ORGANIZATION,
)

__all__ = [
    "FAKE_API_KEY",
    "FAKE_MAX_OUTPUT_BYTES",
    "FAKE_ORGANIZATION",
    "DaytonaFake",
    "open_fake_daytona",
    "routes",
]
