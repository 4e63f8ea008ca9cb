"""E2B provider for mango: one Firecracker microVM sandbox per Session, over httpx.

Select it with ``MANGO_SANDBOX=e2b`` and ``E2B_API_KEY``. No vendor SDK at
run time: the control plane (:mod:`mango_provider_e2b.control`) and envd's
Connect protocol (:mod:`mango_provider_e2b.envd`,
:mod:`mango_provider_e2b.connect`) are spoken directly, one connection pool
each per provider instance. Sandboxes pause when idle and are resumed on
every acquire. The same client serves Tencent CubeSandbox
(``mango-provider-cube``), which speaks this protocol behind its own proxy.

:mod:`mango_provider_e2b.fake` is a fake of the service (control plane and
envd) whose sandboxes run real local processes: the offline conformance
target, proven by tests that drive it with the official ``e2b`` SDK.

The names below are loaded on first use: the plugin's entry point imports
this package on every mango command, and the protocol client (httpx,
stamina) is only worth importing when E2B or Cube is the provider selected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango_provider_e2b.control import CUBE, E2B, ControlPlane, Dialect, SandboxInfo
    from mango_provider_e2b.options import EnvdOptions, parse_duration
    from mango_provider_e2b.provider import E2BProvider
    from mango_provider_e2b.sandbox import ROOT, E2BSandbox
    from mango_provider_e2b.settings import open_e2b_provider, read_e2b_options

_WHERE = {
    "CUBE": "mango_provider_e2b.control",
    "E2B": "mango_provider_e2b.control",
    "ROOT": "mango_provider_e2b.sandbox",
    "ControlPlane": "mango_provider_e2b.control",
    "Dialect": "mango_provider_e2b.control",
    "E2BProvider": "mango_provider_e2b.provider",
    "E2BSandbox": "mango_provider_e2b.sandbox",
    "EnvdOptions": "mango_provider_e2b.options",
    "SandboxInfo": "mango_provider_e2b.control",
    "open_e2b_provider": "mango_provider_e2b.settings",
    "parse_duration": "mango_provider_e2b.options",
    "read_e2b_options": "mango_provider_e2b.settings",
}

__all__ = [
    "CUBE",
    "E2B",
    "ROOT",
    "ControlPlane",
    "Dialect",
    "E2BProvider",
    "E2BSandbox",
    "EnvdOptions",
    "SandboxInfo",
    "open_e2b_provider",
    "parse_duration",
    "read_e2b_options",
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
