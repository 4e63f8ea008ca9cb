"""The worker's Prometheus endpoint: an OpenTelemetry SDK behind mango's and Temporal's figures.

``mango worker`` with ``MANGO_METRICS_PORT`` set calls :func:`serve_metrics`,
which (needs the ``mango-core[metrics]`` extra):

* sets a global OpenTelemetry ``MeterProvider`` whose reader is the
  OpenTelemetry Prometheus exporter, and serves it over HTTP with
  ``prometheus-client`` on ``MANGO_METRICS_HOST:MANGO_METRICS_PORT``, so
  mango's own instruments (:mod:`mango.app.telemetry`) are scraped there;
* sets a global ``TracerProvider`` (spans are then real, and reach any span
  processor the deployment adds; none exports by default);
* gives Temporal's Core a :class:`temporalio.runtime.MetricBuffer` that
  temporalio's own :class:`~temporalio.contrib.opentelemetry.MetricsExporter`
  drains into the same MeterProvider (activity and workflow outcomes,
  latencies, polls: Temporal's metrics, not reimplemented), and the client
  temporalio's :class:`~temporalio.contrib.opentelemetry.TracingInterceptor`.

Why the OpenTelemetry exporter rather than ``prometheus-client`` alone: every
figure is recorded once, through the OpenTelemetry API, so the same
instruments reach Prometheus here and any OTLP pipeline an embedding
application configures, and Temporal's metrics join them through
temporalio's own exporter. ``prometheus-client`` still serves the HTTP
endpoint (the exporter depends on it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from mango.domain.errors import ConfigurationError

__all__ = ["TemporalTelemetry", "serve_metrics"]

_BUFFER_SIZE = 200_000
"""Temporal Core's metric updates held between two drains (every second). Core drops what
does not fit, and a starved worker drains late: temporalio asks for tens of thousands or
more (a CI worker whose figures never completed ran with 10 000)."""


@attrs.frozen
class TemporalTelemetry:
    """What a Temporal client needs to report into the configured SDK."""

    runtime: Runtime
    interceptors: Sequence[Any]


def _sdk() -> tuple[Any, Any, Any, Any, Any]:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from prometheus_client import start_http_server
    except ImportError as exc:
        raise ConfigurationError(
            f"MANGO_METRICS_PORT needs the OpenTelemetry SDK and exporter ({exc.name} is missing)",
            hint="install mango-core[metrics], or unset MANGO_METRICS_PORT",
        ) from None
    return PrometheusMetricReader, MeterProvider, Resource, TracerProvider, start_http_server


@contextlib.asynccontextmanager
async def serve_metrics(host: str, port: int) -> AsyncIterator[TemporalTelemetry]:
    """Serve ``/metrics`` on ``host:port`` for the block; yield what the Temporal client needs."""
    from opentelemetry import metrics, trace
    from temporalio.contrib.opentelemetry import MetricsExporter, TracingInterceptor

    reader_type, meter_provider_type, resource_type, tracer_provider_type, serve = _sdk()
    resource = resource_type.create({"service.name": "mango-worker"})
    meter_provider = meter_provider_type(metric_readers=[reader_type()], resource=resource)
    metrics.set_meter_provider(meter_provider)
    trace.set_tracer_provider(tracer_provider_type(resource=resource))
    try:
        server, thread = serve(port, addr=host)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
            hint="choose a free port in MANGO_METRICS_PORT",
        ) from None
    buffer = MetricBuffer(_BUFFER_SIZE)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    try:
        async with MetricsExporter(buffer, meter_provider):
            yield TemporalTelemetry(runtime, (TracingInterceptor(),))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        meter_provider.shutdown()
