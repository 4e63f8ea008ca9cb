"""mango's spans and metrics, through the OpenTelemetry API only.

Nothing here configures an SDK: with none installed (or none set up by the
embedding application) every span and instrument is a no-op. ``mango worker``
sets one up when ``MANGO_METRICS_PORT`` is set (:mod:`mango.temporal.metrics`).

Instruments (meter ``mango``; units in seconds):

* ``mango.provider.duration`` (histogram): one provider call (``create``,
  ``attach``, ``destroy``, ``find``, ``list_owned``, ``purge``,
  ``destroy_owned``, and a sandbox's ``exec``), by ``provider``,
  ``operation`` and ``outcome`` (``ok`` or the error class);
* ``mango.provider.errors`` (counter): failed provider calls by ``kind``;
* ``mango.sandboxes.created`` / ``destroyed`` / ``lost`` / ``reconciled`` /
  ``swept`` / ``evicted`` (counters), by ``provider``;
* ``mango.exec.truncations`` (counter): output streams cut at the cap, by ``stream``;
* ``mango.lifecycle.effect.duration`` (histogram): every lifecycle effect by
  ``effect`` (``setup-resource`` is package setup, and resource
  materialization is its own effect), by ``provider``.

Spans: ``mango.session <command>`` for each SessionManager operation and
``mango.provider <operation>`` for each provider call, with ``mango.provider``
and ``mango.session.hash`` (the fixed-length hash of the Session key, as in
ownership labels). The raw Session id is added only if the deployment opts
in (:func:`configure`, ``MANGO_TELEMETRY_SESSION_IDS=1``). No secret ever
reaches an attribute: only names, hashes, counts and error class names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from opentelemetry import metrics, trace

from mango.domain.hashing import session_key_hash
from mango.domain.lifecycle import LifecycleEffect
from mango.domain.values import ExecResult

__all__ = [
    "configure",
    "count_reconciled",
    "count_swept",
    "effect_done",
    "operation_span",
    "provider_call",
    "record_exec",
    "session_attributes",
]

_tracer = trace.get_tracer("mango")
_meter = metrics.get_meter("mango")

_provider_duration = _meter.create_histogram(
    "mango.provider.duration", unit="s", description="Latency of one provider call"
)
_provider_errors = _meter.create_counter(
    "mango.provider.errors", description="Provider calls that failed, by error kind"
)
_created = _meter.create_counter("mango.sandboxes.created", description="Sandboxes bound")
_destroyed = _meter.create_counter(
    "mango.sandboxes.destroyed", description="Sandboxes torn down by a deletion"
)
_lost = _meter.create_counter(
    "mango.sandboxes.lost", description="Bound sandboxes the provider no longer knew"
)
_reconciled = _meter.create_counter(
    "mango.sandboxes.reconciled", description="Intents and deletions the reconciler finished"
)
_swept = _meter.create_counter(
    "mango.sandboxes.swept", description="Orphans removed by the sweep (mango gc)"
)
_evicted = _meter.create_counter(
    "mango.sandboxes.evicted", description="Idle sandboxes destroyed by the eviction"
)
_truncations = _meter.create_counter(
    "mango.exec.truncations", description="Exec output streams cut at the per-stream cap"
)
_effect_duration = _meter.create_histogram(
    "mango.lifecycle.effect.duration", unit="s", description="Duration of one lifecycle effect"
)

_include_session_ids = False


def configure(*, session_ids: bool) -> None:
    """Whether spans carry the raw Session id besides its hash (off unless a deployment says)."""
    global _include_session_ids  # noqa: PLW0603 - one process-wide choice, like OTel's own
    _include_session_ids = session_ids


def session_attributes(session_id: str) -> dict[str, str]:
    """The span attributes that name a Session: its hash, and its id only if configured."""
    attributes = {"mango.session.hash": session_key_hash(session_id)}
    if _include_session_ids:
        attributes["mango.session.id"] = session_id
    return attributes


def _tracing() -> bool:
    """Whether a tracer provider is set: until one is, every span would be a no-op.

    The API's proxy provider stands in until an application (or ``mango worker``
    with ``MANGO_METRICS_PORT``) sets one; its spans record nothing and carry no
    context worth propagating, so they are not made at all (they cost about a
    fifth of a warm ``acquire``). A provider set later is seen at once.
    """
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextlib.contextmanager
def operation_span(command: str, provider: str, session_id: str) -> Iterator[None]:
    """A span around one SessionManager operation (none while no tracer provider is set)."""
    if not _tracing():
        yield
        return
    attributes = {"mango.provider": provider, **session_attributes(session_id)}
    with _tracer.start_as_current_span(f"mango.session {command}", attributes=attributes):
        yield


@contextlib.asynccontextmanager
async def provider_call(
    provider: str, operation: str, session_key: str | None = None
) -> AsyncIterator[None]:
    """Time one provider call (histogram, error counter) inside its span (if tracing)."""
    span: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if _tracing():
        attributes: dict[str, Any] = {"mango.provider": provider, "mango.operation": operation}
        if session_key is not None:
            attributes.update(session_attributes(session_key))
        span = _tracer.start_as_current_span(f"mango.provider {operation}", attributes=attributes)
    started = time.perf_counter()
    outcome = "ok"
    with span:
        try:
            yield
        except BaseException as exc:
            outcome = type(exc).__name__
            if not isinstance(exc, GeneratorExit):
                _provider_errors.add(
                    1, {"provider": provider, "operation": operation, "kind": outcome}
                )
            raise
        finally:
            _provider_duration.record(
                time.perf_counter() - started,
                {"provider": provider, "operation": operation, "outcome": outcome},
            )


def record_exec(provider: str, result: ExecResult) -> None:
    """Count the streams of ``result`` that were cut at the cap."""
    for stream, cut in (("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)):
        if cut:
            _truncations.add(1, {"provider": provider, "stream": stream})


def effect_done(provider: str, effect: str, seconds: float, signal: str | None) -> None:
    """One lifecycle effect finished: its duration, and the fleet counter it moves."""
    _effect_duration.record(seconds, {"provider": provider, "effect": effect})
    attributes = {"provider": provider}
    if effect == LifecycleEffect.PUBLISH_BINDING and signal is None:  # not outbid
        _created.add(1, attributes)
    elif effect == LifecycleEffect.DESTROY_RESOURCE:
        _destroyed.add(1, attributes)
    elif effect == LifecycleEffect.RECORD_LOST:
        _lost.add(1, attributes)
    elif effect == LifecycleEffect.DESTROY_EVICTED:
        _evicted.add(1, attributes)


def count_reconciled(provider: str, completed: int) -> None:
    """Intents or deletions a reconciliation pass finished."""
    if completed:
        _reconciled.add(completed, {"provider": provider})


def count_swept(provider: str, destroyed: int) -> None:
    """Orphans a sweep removed."""
    if destroyed:
        _swept.add(destroyed, {"provider": provider})
