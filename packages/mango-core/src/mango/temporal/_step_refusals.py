"""The errors a Session workflow refuses or ends a step with when it is cancelled.

Pure and deterministic: used by :class:`~mango.temporal.workflows.SessionWorkflow`
(imported passed through). The ``type`` of each (``ToolStepCancelled``) and its
message are part of recorded histories, so they stay as they are.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

__all__ = ["STEP_CANCELLED", "cancelled_step", "workflow_cancelling"]

STEP_CANCELLED = "ToolStepCancelled"
"""The ``ApplicationError`` type of a step cancelled, or refused because of a cancellation."""


def cancelled_step(tool: str) -> ApplicationError:
    """The error a ``tool`` (or ``exec``) step ends with when its workflow cancels it."""
    return ApplicationError(
        f"the {tool} step was cancelled together with the session workflow "
        "(the session may be being deleted)",
        type=STEP_CANCELLED,
        non_retryable=True,
    )


def workflow_cancelling() -> ApplicationError:
    """The error a new step is refused with while its Session workflow is being cancelled."""
    return ApplicationError(
        "the session workflow is being cancelled", type=STEP_CANCELLED, non_retryable=True
    )
