"""Spans of SessionManager operations and provider calls: provider name and key hash, no raw id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mango.app import InMemoryBindingStore, SessionManager, telemetry
from mango.app.instrumented import instrument
from mango.domain import Command, SandboxSpec, session_key_hash
from mango.domain.fleet import SweepableProvider
from mango.domain.ports import PurgingProvider
from mango.local import LocalProvider


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span this module's tests finish (the process's one SDK tracer provider)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    exporter = InMemorySpanExporter()
    current.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


async def test_spans_name_the_provider_and_hash_the_session(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """acquire and exec leave spans with the provider and the key hash, never the raw id."""
    spans.clear()
    provider = instrument(LocalProvider(tmp_path))
    manager = SessionManager(provider, InMemoryBindingStore())
    await manager.ensure_session("secret-session-id")
    sandbox = await manager.acquire("secret-session-id", SandboxSpec())
    await sandbox.exec(Command(argv=("true",)))
    finished = {span.name: dict(span.attributes or {}) for span in spans.get_finished_spans()}
    assert {"mango.session acquire", "mango.provider create", "mango.provider exec"} <= set(
        finished
    )
    digest = session_key_hash("secret-session-id")
    assert finished["mango.session acquire"] == {
        "mango.provider": "local",
        "mango.session.hash": digest,
    }
    assert finished["mango.provider create"]["mango.session.hash"] == digest
    assert all("secret-session-id" not in str(attrs) for attrs in finished.values())


async def test_raw_ids_only_when_the_deployment_says_so(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """MANGO_TELEMETRY_SESSION_IDS=1 (configure) adds the id beside the hash."""
    spans.clear()
    telemetry.configure(session_ids=True)
    try:
        manager = SessionManager(instrument(LocalProvider(tmp_path)), InMemoryBindingStore())
        await manager.ensure_session("visible")
        await manager.acquire("visible", SandboxSpec())
    finally:
        telemetry.configure(session_ids=False)
    [acquire] = [s for s in spans.get_finished_spans() if s.name == "mango.session acquire"]
    assert dict(acquire.attributes or {})["mango.session.id"] == "visible"


def test_the_wrapper_offers_what_the_provider_offers(tmp_path: Path) -> None:
    """purge and destroy_owned are there exactly when the wrapped provider has them."""
    wrapped = instrument(LocalProvider(tmp_path))
    assert isinstance(wrapped, PurgingProvider)
    assert isinstance(wrapped, SweepableProvider)
    assert instrument(wrapped) is wrapped


class _RefusingTracer:
    """A tracer that fails the test if anything asks it for a span."""

    def start_as_current_span(self, name: str, **_: object) -> object:
        raise AssertionError(f"a span {name!r} was made")


async def test_no_span_is_made_until_a_tracer_provider_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the API's proxy provider (nothing set up), operations and provider calls make no span;
    with a provider set, the same calls ask the tracer for theirs."""
    monkeypatch.setattr(telemetry, "_tracer", _RefusingTracer())
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    manager = SessionManager(instrument(LocalProvider(tmp_path)), InMemoryBindingStore())
    await manager.ensure_session("untraced")
    sandbox = await manager.acquire("untraced", SandboxSpec())
    assert (await sandbox.exec(Command(argv=("true",)))).exit_code == 0
    monkeypatch.setattr(trace, "get_tracer_provider", TracerProvider)
    with pytest.raises(AssertionError, match=r"a span 'mango\.session acquire' was made"):
        await manager.acquire("untraced", SandboxSpec())
