"""Results that fit the namespace's payload limit, so a step never fails after it ran.

The server (and the SDK before it) refuses a payload over the namespace's
blob size limit (2 MiB by default): an ``ExecCommand`` or ``ReadFile`` step
would fail after its work was done, and every retry would do it again.
:func:`fit_payload` cuts an exec result's longer stream until the result
fits; :func:`read_budget` says how many file bytes a ``ReadFile`` result can
carry, measured through the worker's own converter and codec.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from mango.domain.values import ExecResult
from mango.temporal.messages import ReadFileOutput
from mango.temporal.payloads import data_converter

__all__ = [
    "DEFAULT_BLOB_LIMIT",
    "PAYLOAD_MARGIN",
    "blob_size_limit",
    "fit_payload",
    "payload_size",
    "read_budget",
]

DEFAULT_BLOB_LIMIT = 2 * 1024 * 1024
"""Temporal's default blob size limit, assumed when the server does not report its own."""
PAYLOAD_MARGIN = 64 * 1024
"""Room left under the limit for the rest of the envelope."""

_LOG = logging.getLogger("mango.temporal.activities")

SizeOf = Callable[[ExecResult | ReadFileOutput], Awaitable[int]]
"""The encoded size of a result, in bytes (through the worker's converter and codec)."""


async def blob_size_limit(client: Client | None) -> int:
    """The namespace's blob size limit, or :data:`DEFAULT_BLOB_LIMIT` if it cannot be read."""
    limit = 0
    if client is not None:
        try:
            response = await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=client.namespace)
            )
            limit = response.namespace_info.limits.blob_size_limit_error
        except RPCError as exc:
            _LOG.warning("could not read the namespace's payload limit: %s", exc)
    return limit if limit > 0 else DEFAULT_BLOB_LIMIT


async def payload_size(client: Client | None, result: ExecResult | ReadFileOutput) -> int:
    """The bytes ``result`` takes as a payload (the client's converter, else mango's)."""
    converter = client.data_converter if client is not None else data_converter
    return sum(payload.ByteSize() for payload in await converter.encode([result]))


async def fit_payload(result: ExecResult, budget: int, size_of: SizeOf) -> ExecResult:
    """``result``, cut further if its payload would exceed ``budget`` bytes.

    Both streams at a large cap can exceed it, so the longer stream keeps a
    shorter prefix (its truncation flag set) until the result fits.
    """
    for _ in range(8):
        size = await size_of(result)
        if size <= budget:
            return result
        over = size - budget
        # base85 in JSON: 5 characters per 4 bytes, plus slack for the rest.
        cut = over * 4 // 5 + 1024
        if len(result.stdout) >= len(result.stderr):
            keep = max(len(result.stdout) - cut, 0)
            result = attrs.evolve(result, stdout=result.stdout[:keep], stdout_truncated=True)
        else:
            keep = max(len(result.stderr) - cut, 0)
            result = attrs.evolve(result, stderr=result.stderr[:keep], stderr_truncated=True)
        _LOG.warning(
            "exec output cut to %d + %d bytes to fit Temporal's payload limit (%d bytes)",
            len(result.stdout),
            len(result.stderr),
            budget,
        )
    return result


async def read_budget(budget: int, size_of: SizeOf) -> int:
    """The most file bytes a :class:`ReadFileOutput` can carry within ``budget`` bytes."""
    # Measured, not assumed: the converter's (and codec's) overhead for one byte and for
    # one kilobyte of data gives the cost per byte and the fixed part.
    one = await size_of(ReadFileOutput(data=b"\xff"))
    kilo = await size_of(ReadFileOutput(data=b"\xff" * 1025))
    per_kilo = kilo - one
    return max((budget - one) * 1024 // per_kilo, 0)
