"""Retry policies of workflow steps, from a :class:`~mango.temporal.messages.StepPolicy`.

Pure and deterministic: used by the workflows (imported passed through).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from mango.temporal.messages import StepPolicy

__all__ = ["retry_policy"]


def retry_policy(policy: StepPolicy) -> RetryPolicy:
    """Exponential backoff (factor 2) between the policy's first and longest interval."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=policy.initial_retry),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=policy.max_retry_interval),
        maximum_attempts=policy.maximum_attempts,
    )
