"""Temporal Core's buffered metrics, drained into OpenTelemetry: every update under its own labels.

Core hands each update's attribute set over as a Python object that it drops
once the set is no longer used; the next set is often allocated in its place,
with the same ``id()``. A drain that remembers sets by ``id()`` (temporalio's
experimental ``MetricsExporter`` does) records the later updates under the
earlier labels. The updates here come from a real Core runtime's meter, with a
fresh attribute set per update, as Core makes one per activity.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from mango.temporal.metrics import CoreMetricsDrain

TYPES = [f"Activity{index}" for index in range(7)]
ROUNDS = 700


def _points(reader: InMemoryMetricReader, name: str) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, Any] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[str(point.attributes["activity_type"])] = point
    return found


@pytest.fixture
def core() -> tuple[Runtime, MetricBuffer]:
    buffer = MetricBuffer(100_000)
    return Runtime(telemetry=TelemetryConfig(metrics=buffer)), buffer


def test_every_update_keeps_its_own_labels(core: tuple[Runtime, MetricBuffer]) -> None:
    """Counters, histograms and gauges per activity type, with a drain after each update."""
    runtime, buffer = core
    reader = InMemoryMetricReader()
    drain = CoreMetricsDrain(buffer, MeterProvider(metric_readers=[reader]).get_meter("t"))
    meter = runtime.metric_meter
    counter = meter.create_counter("received")
    histogram = meter.create_histogram("latency")
    gauge = meter.create_gauge("slots")
    sent: Counter[str] = Counter()
    last: dict[str, int] = {}
    drained = 0
    for index in range(ROUNDS):
        activity_type = TYPES[index % len(TYPES)] if index % 3 else TYPES[index % 2]
        labels = {"activity_type": activity_type}
        counter.with_additional_attributes(labels).add(1)
        histogram.with_additional_attributes(labels).record(index)
        gauge.with_additional_attributes(labels).set(index)
        sent[activity_type] += 1
        last[activity_type] = index
        drained += drain.drain()  # the attribute sets above are dropped before the next round
    assert drained == 3 * ROUNDS
    counts = {name: point.value for name, point in _points(reader, "received").items()}
    assert counts == dict(sent)
    latencies = {name: point.count for name, point in _points(reader, "latency").items()}
    assert latencies == dict(sent)
    assert {name: point.value for name, point in _points(reader, "slots").items()} == last


async def test_the_drain_runs_for_the_block_and_once_at_its_end(
    core: tuple[Runtime, MetricBuffer],
) -> None:
    """An update recorded just before the block ends is not lost."""
    runtime, buffer = core
    reader = InMemoryMetricReader()
    counter = runtime.metric_meter.create_counter("received")
    async with CoreMetricsDrain(buffer, MeterProvider(metric_readers=[reader]).get_meter("t")):
        counter.with_additional_attributes({"activity_type": "Last"}).add(2)
    assert _points(reader, "received")["Last"].value == 2
