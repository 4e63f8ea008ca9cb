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
  :class:`CoreMetricsDrain` drains into the same MeterProvider every second
  (activity and workflow outcomes, latencies, polls: Temporal's metrics, not
  reimplemented), and the client temporalio's
  :class:`~temporalio.contrib.opentelemetry.TracingInterceptor`.

Why not temporalio's own ``contrib.opentelemetry.MetricsExporter`` (1.35,
experimental): it caches each update's attribute set by ``id()`` and keeps
only a copy, while Core drops an attribute set (an activity's, say) once it
is no longer used; the next set allocated in its place has the same ``id()``,
and its updates were recorded under the labels of the one before. Temporal's
figures then carried the wrong ``activity_type`` (a CI run counted three
``ExecCommand`` executions for two). The drain converts each update's
attributes, and finds instruments by name and kind.

Why the OpenTelemetry exporter rather than ``prometheus-client`` alone: every
figure is recorded once, through the OpenTelemetry API, so the same
instruments reach Prometheus here and any OTLP pipeline an embedding
application configures, and Temporal's metrics join them through
temporalio's own exporter. ``prometheus-client`` still serves the HTTP
endpoint (the exporter depends on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import attrs
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    BUFFERED_METRIC_KIND_HISTOGRAM,
    BufferedMetric,
    BufferedMetricUpdate,
    MetricBuffer,
    Runtime,
    TelemetryConfig,
)

from mango.domain.errors import ConfigurationError

__all__ = ["CoreMetricsDrain", "TemporalTelemetry", "serve_metrics"]

_LOG = logging.getLogger(__name__)

_BUFFER_SIZE = 200_000
"""Temporal Core's metric updates held between two drains (every second). Core drops what
does not fit, and a starved worker drains late: temporalio asks for tens of thousands or
more (a CI worker whose figures never completed ran with 10 000)."""


@attrs.frozen
class TemporalTelemetry:
    """What a Temporal client needs to report into the configured SDK."""

    runtime: Runtime
    interceptors: Sequence[Any]


_Labels = tuple[tuple[str, Any], ...]


class _Gauge:
    """The latest value per label set, read by the SDK's callback (on its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[_Labels, float] = {}

    def set(self, labels: _Labels, value: float) -> None:
        with self._lock:
            self._values[labels] = value

    def observe(self, _options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        with self._lock:
            return [Observation(value, dict(labels)) for labels, value in self._values.items()]


class CoreMetricsDrain:
    """Drains Temporal Core's :class:`MetricBuffer` into an OpenTelemetry meter, every second.

    Counters add their deltas, histograms record their values, gauges keep the
    latest value per label set. Each update's attributes are read afresh (an
    attribute set's ``id()`` is reused once Core drops it: see the module's
    note), instruments are found by name and kind. Used as an async context
    manager: the drain runs for the block, and once more at its end.
    """

    def __init__(self, buffer: MetricBuffer, meter: Any, *, interval: float = 1.0) -> None:
        self._buffer = buffer
        self._meter = meter
        self._interval = interval
        self._instruments: dict[tuple[str, int], Any] = {}
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def drain(self) -> int:
        """Apply every update the buffer holds now; return how many there were."""
        updates = self._buffer.retrieve_updates()
        for update in updates:
            try:
                self._apply(update)
            except Exception:  # noqa: BLE001 - one figure failing never stops the drain
                _LOG.exception("cannot record Temporal metric %s", update.metric.name)
        return len(updates)

    def _apply(self, update: BufferedMetricUpdate) -> None:
        instrument = self._instrument(update.metric)
        labels = dict(update.attributes)
        kind = update.metric.kind
        if kind == BUFFERED_METRIC_KIND_COUNTER:
            instrument.add(update.value, labels)
        elif kind == BUFFERED_METRIC_KIND_HISTOGRAM:
            instrument.record(update.value, labels)
        else:
            instrument.set(tuple(sorted(labels.items())), update.value)

    def _instrument(self, metric: BufferedMetric) -> Any:
        key = (metric.name, int(metric.kind))
        instrument = self._instruments.get(key)
        if instrument is None:
            unit, description = metric.unit or "", metric.description or ""
            if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                instrument = self._meter.create_counter(metric.name, unit, description)
            elif metric.kind == BUFFERED_METRIC_KIND_HISTOGRAM:
                instrument = self._meter.create_histogram(metric.name, unit, description)
            elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                instrument = _Gauge()
                self._meter.create_observable_gauge(
                    metric.name, [instrument.observe], unit, description
                )
            else:
                raise ValueError(f"unknown kind {metric.kind} of Temporal metric {metric.name}")
            self._instruments[key] = instrument
        return instrument

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval)

    async def __aenter__(self) -> CoreMetricsDrain:
        self._task = asyncio.create_task(self._run(), name="temporal-metrics-drain")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        self.drain()  # what Core recorded right before the end


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
    from temporalio.contrib.opentelemetry import TracingInterceptor

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
        async with CoreMetricsDrain(buffer, meter_provider.get_meter("temporalio")):
            yield TemporalTelemetry(runtime, (TracingInterceptor(),))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        meter_provider.shutdown()
