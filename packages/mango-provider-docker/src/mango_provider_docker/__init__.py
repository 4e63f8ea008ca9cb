"""Docker Engine provider for mango: one container per Session.

Select it with ``MANGO_SANDBOX=docker``. It talks to the Engine API through
aiodocker (never the docker CLI), honours ``DOCKER_HOST``, and negotiates the
API version with the daemon.

* **Identity.** Each Session key gets one container named ``mango-<32 hex>``
  (a hash of the key) with ownership labels; create is create-if-absent on
  that name, attach inspects the referenced container id and verifies the
  labels, and starts the container again if it was stopped.
* **Isolation.** No network unless the spec asks for ``bridge``; memory, CPU
  and pids limits; an init process as PID 1 that reaps zombies.
* **Exec.** Through the exec API with stdin, per-stream output caps (memory
  O(cap)), a timeout and cancellation that kill only the command's process
  tree, leaving the sandbox usable (see :mod:`mango_provider_docker.execution`).
* **Files.** Through the archive API, refusing ``..``, absolute paths and
  symlinks anywhere in a path (see :mod:`mango_provider_docker.files`).
* **Capabilities.** ``package-setup``; ``file-resources``,
  ``session-outputs`` and ``skill-bundles``: a read-only uploads mount, a
  writable outputs mount and a read-only skills mount from the sandbox's
  host directory (see :mod:`mango_provider_docker.mounts`); limited network
  is rejected at admission.

Settings are in :mod:`mango_provider_docker.settings`.

The names below are loaded on first use: the plugin's entry point imports
this package on every mango command, and aiodocker is only worth importing
when the Docker provider is the one selected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango_provider_docker.engine import Engine
    from mango_provider_docker.provider import (
        DEFAULT_IMAGE,
        DEFAULT_MAX_OUTPUT_BYTES,
        DockerProvider,
    )
    from mango_provider_docker.sandbox import DockerSandbox
    from mango_provider_docker.settings import (
        DockerSettings,
        open_docker_provider,
        read_docker_settings,
    )

_WHERE = {
    "DEFAULT_IMAGE": "mango_provider_docker.layout",
    "DEFAULT_MAX_OUTPUT_BYTES": "mango_provider_docker.provider",
    "DockerProvider": "mango_provider_docker.provider",
    "DockerSandbox": "mango_provider_docker.sandbox",
    "DockerSettings": "mango_provider_docker.settings",
    "Engine": "mango_provider_docker.engine",
    "open_docker_provider": "mango_provider_docker.settings",
    "read_docker_settings": "mango_provider_docker.settings",
}

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DockerProvider",
    "DockerSandbox",
    "DockerSettings",
    "Engine",
    "open_docker_provider",
    "read_docker_settings",
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
