"""Names on the Temporal side, and which provider's workers a Session's work goes to.

Each worker serves exactly one provider, on the task queue named after it
(``mango-<provider>``; ``MANGO_TEMPORAL_TASK_QUEUE_PREFIX`` changes ``mango``,
to separate pools of workers). Work for a Session goes to the provider its
binding names; failing that, the provider of its provisioning intent; failing
that, the configured default (``MANGO_SANDBOX``). So heterogeneous workers can
share one namespace and one database, and a Session never moves between
providers.

Workflow ids are deterministic and derive from the Session id alone, so
repeated requests join the running execution instead of starting a second
one. It also means that deployments with separate databases (whose Session
ids may collide) need separate namespaces.
"""

from __future__ import annotations

import re

from mango.domain.errors import InvalidInput
from mango.domain.ports import BindingStore
from mango.domain.values import validate_provider_name, validate_session_id

__all__ = [
    "CANCEL_STEP_SIGNAL",
    "CLEANUP_WORKFLOW",
    "DEFAULT_TASK_QUEUE_PREFIX",
    "EXEC_UPDATE",
    "HEALTH_WORKFLOW",
    "RECONCILER_WORKFLOW",
    "RUN_TOOL_UPDATE",
    "SESSION_WORKFLOW",
    "cleanup_workflow_id",
    "reconciler_workflow_id",
    "route_provider",
    "session_workflow_id",
    "task_queue_for",
    "validate_task_queue_prefix",
]

DEFAULT_TASK_QUEUE_PREFIX = "mango"

# Registered workflow type names: stable, because recorded histories refer to them.
SESSION_WORKFLOW = "SessionWorkflow"
CLEANUP_WORKFLOW = "SandboxCleanupWorkflow"
RECONCILER_WORKFLOW = "ReconcilerWorkflow"
HEALTH_WORKFLOW = "ProviderHealthWorkflow"
RUN_TOOL_UPDATE = "RunTool"
EXEC_UPDATE = "Exec"
CANCEL_STEP_SIGNAL = "CancelStep"
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")


def validate_task_queue_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a usable task queue prefix, else raise :class:`InvalidInput`."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise InvalidInput(
            f"task queue prefix {prefix!r} must be 1-100 letters, digits, '.', '_' or '-'"
        )
    return prefix


def task_queue_for(provider: str, prefix: str = DEFAULT_TASK_QUEUE_PREFIX) -> str:
    """The task queue of ``provider``'s workers: ``<prefix>-<provider>``."""
    return f"{validate_task_queue_prefix(prefix)}-{validate_provider_name(provider)}"


def session_workflow_id(session_id: str) -> str:
    """Id of the Session's tool workflow: ``session:<session id>``."""
    return f"session:{validate_session_id(session_id)}"


def cleanup_workflow_id(session_id: str) -> str:
    """Id of the Session's cleanup workflow: ``sandbox-cleanup:<session id>``."""
    return f"sandbox-cleanup:{validate_session_id(session_id)}"


def reconciler_workflow_id(task_queue: str) -> str:
    """Id of the reconciler of one task queue (one provider): ``mango-reconciler:<queue>``."""
    return f"mango-reconciler:{task_queue}"


async def route_provider(store: BindingStore, session_id: str, default: str) -> str:
    """The provider whose workers must handle ``session_id``.

    The binding's provider, else the provisioning intent's, else ``default``.
    """
    binding = await store.get_binding(session_id)
    if binding is not None:
        return binding.ref.provider
    intent = await store.get_intent(session_id)
    if intent is not None:
        return intent.provider
    return validate_provider_name(default)
