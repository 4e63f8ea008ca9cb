"""Temporal adapter: activities over SessionManager, deterministic workflows, the worker.

* :mod:`~mango.temporal.activities`: :class:`MangoActivities`, the only
  Temporal code that touches ports (SessionManager, store, provider);
* :mod:`~mango.temporal.workflows`: the Session tool workflow, the
  per-Session cleanup workflow, the reconciler and the health workflow;
* the built-in agent tools (``bash``, ``read``, ``write``, ``edit``,
  ``glob``, ``grep``) live in the application layer (:mod:`mango.app.tools`);
  their names are re-exported here, as before;
* :mod:`~mango.temporal.payloads`: cattrs JSON payloads (:data:`data_converter`);
* :mod:`~mango.temporal.routing`: task queues (``mango-<provider>``) and ids;
* :mod:`~mango.temporal.client`: :class:`Orchestrator`, the client side;
* :mod:`~mango.temporal.worker`: :func:`build_worker` and :func:`serve`.

The names below are imported lazily (on first attribute access): the workflow
sandbox re-imports this package for every workflow run, and a light package
keeps that cheap and free of adapter imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango.app.tools import TOOL_NAMES, ToolCall, ToolFailed, ToolResult, ToolRunner
    from mango.temporal.activities import MangoActivities
    from mango.temporal.client import Orchestrator, active_pollers, connect
    from mango.temporal.failures import raise_as_mango_error, to_application_error
    from mango.temporal.messages import ProviderHealth, StepPolicy
    from mango.temporal.payloads import data_converter
    from mango.temporal.routing import (
        DEFAULT_TASK_QUEUE_PREFIX,
        cleanup_workflow_id,
        route_provider,
        session_workflow_id,
        task_queue_for,
    )
    from mango.temporal.worker import build_worker, ensure_reconciler, serve
    from mango.temporal.workflows import (
        ProviderHealthWorkflow,
        ReconcilerWorkflow,
        SandboxCleanupWorkflow,
        SessionWorkflow,
    )

__all__ = [
    "DEFAULT_TASK_QUEUE_PREFIX",
    "TOOL_NAMES",
    "MangoActivities",
    "Orchestrator",
    "ProviderHealth",
    "ProviderHealthWorkflow",
    "ReconcilerWorkflow",
    "SandboxCleanupWorkflow",
    "SessionWorkflow",
    "StepPolicy",
    "ToolCall",
    "ToolFailed",
    "ToolResult",
    "ToolRunner",
    "active_pollers",
    "build_worker",
    "cleanup_workflow_id",
    "connect",
    "data_converter",
    "ensure_reconciler",
    "raise_as_mango_error",
    "route_provider",
    "serve",
    "session_workflow_id",
    "task_queue_for",
    "to_application_error",
]

_LAZY = {
    "DEFAULT_TASK_QUEUE_PREFIX": "mango.temporal.routing",
    "MangoActivities": "mango.temporal.activities",
    "Orchestrator": "mango.temporal.client",
    "ProviderHealth": "mango.temporal.messages",
    "ProviderHealthWorkflow": "mango.temporal.workflows",
    "ReconcilerWorkflow": "mango.temporal.workflows",
    "SandboxCleanupWorkflow": "mango.temporal.workflows",
    "SessionWorkflow": "mango.temporal.workflows",
    "StepPolicy": "mango.temporal.messages",
    "TOOL_NAMES": "mango.app.tools",
    "ToolCall": "mango.app.tools",
    "ToolFailed": "mango.app.tools",
    "ToolResult": "mango.app.tools",
    "ToolRunner": "mango.app.tools",
    "active_pollers": "mango.temporal.client",
    "build_worker": "mango.temporal.worker",
    "cleanup_workflow_id": "mango.temporal.routing",
    "connect": "mango.temporal.client",
    "data_converter": "mango.temporal.payloads",
    "ensure_reconciler": "mango.temporal.worker",
    "raise_as_mango_error": "mango.temporal.failures",
    "route_provider": "mango.temporal.routing",
    "serve": "mango.temporal.worker",
    "session_workflow_id": "mango.temporal.routing",
    "task_queue_for": "mango.temporal.routing",
    "to_application_error": "mango.temporal.failures",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
