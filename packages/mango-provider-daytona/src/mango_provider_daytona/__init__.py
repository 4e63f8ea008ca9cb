"""Daytona provider for mango (preview): one Daytona sandbox per Session.

Select it with ``MANGO_SANDBOX=daytona`` and ``DAYTONA_API_KEY``. It talks to
the Daytona API and to each sandbox's toolbox over httpx (the official SDK is
a test-only dependency, used to prove the fake).

* **Identity.** Each Session key gets one sandbox named ``mango-<32 hex>`` (a
  hash of provider, deployment namespace and key) with ownership labels;
  create looks the name up first and resolves a 409 or a lost response by the
  name; the reference holds Daytona's sandbox id.
* **Idle.** Daytona pauses an idle sandbox after ``DAYTONA_AUTO_PAUSE_MINUTES``;
  attach and ``keep_alive`` start a paused, stopped or archived sandbox and
  wait (bounded, with progress) until it is started.
* **Exec.** ``/process/execute`` of an explicit ``/bin/sh -c`` wrapper that
  caps each stream in the sandbox, keeps stdout and stderr apart,
  base64-encodes them and can be killed from a second request (see
  :mod:`mango_provider_daytona.execution`). Output arrives at the end.
* **Files.** Classified by a shell test (the toolbox's stat follows links),
  checked by the kit's path policy, moved by the toolbox's streamed multipart
  download and its upload (see :mod:`mango_provider_daytona.files`).

Settings are in :mod:`mango_provider_daytona.settings`.

The names below are loaded on first use: the plugin's entry point imports
this package on every mango command, and the API client (httpx, stamina) is
only worth importing when Daytona is the provider selected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango.provider import DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_READ_BYTES
    from mango_provider_daytona.layout import DEFAULT_AUTO_PAUSE_MINUTES, PROVIDER_NAME
    from mango_provider_daytona.provider import DaytonaProvider, memory_gib
    from mango_provider_daytona.sandbox import DaytonaSandbox

_WHERE = {
    "DEFAULT_AUTO_PAUSE_MINUTES": "mango_provider_daytona.layout",
    "DEFAULT_MAX_OUTPUT_BYTES": "mango.provider",
    "DEFAULT_MAX_READ_BYTES": "mango.provider",
    "PROVIDER_NAME": "mango_provider_daytona.layout",
    "DaytonaProvider": "mango_provider_daytona.provider",
    "DaytonaSandbox": "mango_provider_daytona.sandbox",
    "memory_gib": "mango_provider_daytona.provider",
}

__all__ = [
    "DEFAULT_AUTO_PAUSE_MINUTES",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_READ_BYTES",
    "PROVIDER_NAME",
    "DaytonaProvider",
    "DaytonaSandbox",
    "memory_gib",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
