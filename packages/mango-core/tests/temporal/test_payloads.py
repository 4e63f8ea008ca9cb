"""cattrs JSON payloads: round trips, the wire format, and typed refusals."""

from __future__ import annotations

import json

import pytest
from temporalio.api.common.v1 import Payload

from mango.app.tools import ToolCall, ToolResult
from mango.domain import ExecResult, InvalidInput, NetworkMode, SandboxRef, SandboxSpec
from mango.temporal.messages import (
    AcquireOutput,
    ProviderHealth,
    ReconcileReport,
    SessionWorkflowInput,
    ToolStepInput,
    WriteFileInput,
)
from mango.temporal.payloads import data_converter

VALUES = [
    SessionWorkflowInput(
        session_id="s-1",
        spec=SandboxSpec(timeout=5, network=NetworkMode.LIMITED, network_allowed_hosts=("b", "a")),
    ),
    ToolStepInput(session_id="s-1", call=ToolCall("bash", {"command": "ls", "timeout": 2.5})),
    WriteFileInput(session_id="s-1", path="bin/x", data=bytes(range(256))),
    ToolResult(tool="bash", output="ok", exec_result=ExecResult(stdout=b"\x00\xff", exit_code=2)),
    AcquireOutput(ref=SandboxRef("local", "/var/lib/x")),
    ReconcileReport(3, 2, (("s-1", "boom"),)),
    ProviderHealth(provider="local", task_queue="mango-local", reachable=True, detail="ok"),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(value: object) -> None:
    """Every message comes back equal through the data converter."""
    converter = data_converter.payload_converter
    [payload] = converter.to_payloads([value])
    assert payload.metadata["encoding"] == b"json/plain"
    assert converter.from_payloads([payload], [type(value)]) == [value]


def test_wire_format_is_plain_json() -> None:
    """Enums travel as values, tuples as lists, bytes as text; readable by other SDKs."""
    [payload] = data_converter.payload_converter.to_payloads(
        [SandboxSpec(network=NetworkMode.BRIDGE, network_allowed_hosts=("x",))]
    )
    raw = json.loads(payload.data)
    assert raw["network"] == "bridge"
    assert raw["network_allowed_hosts"] == ["x"]


def test_plain_values_still_convert() -> None:
    """Values without a mango type (SDK internals, None, lists) use plain JSON."""
    converter = data_converter.payload_converter
    values = [None, "text", 3, [1, "a"], {"k": [True]}]
    assert converter.from_payloads(converter.to_payloads(values), None) == values


def test_a_malformed_payload_is_invalid_input_naming_the_fields() -> None:
    """A payload that does not fit its type raises InvalidInput listing each problem."""
    payload = Payload(
        metadata={"encoding": b"json/plain"},
        data=json.dumps({"session_id": " padded ", "spec": {"timeout": -1}}).encode(),
    )
    with pytest.raises(InvalidInput, match="SessionWorkflowInput") as caught:
        data_converter.payload_converter.from_payloads([payload], [SessionWorkflowInput])
    assert "payload.spec" in str(caught.value)


def _payload(document: object) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(document).encode())


def test_an_unknown_field_is_invalid_input_naming_it() -> None:
    """A field the message does not have is refused, never dropped: a newer writer shows."""
    document = {"session_id": "s-1", "spec": {"timeout": 5, "gpus": 1}, "priority": 3}
    with pytest.raises(InvalidInput) as caught:
        data_converter.payload_converter.from_payloads([_payload(document)], [SessionWorkflowInput])
    message = str(caught.value)
    assert "extra fields found (priority) @ payload" in message
    assert "extra fields found (gpus) @ payload.spec" in message


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"session_id": 5}, "expected str, got int @ payload.session_id"),
        ({"session_id": "s", "spec": {"timeout": "5"}}, "expected float, got str @ payload.spec"),
        ({"session_id": "s", "steps_per_run": True}, "expected int, got bool @ payload.steps_"),
        ({"session_id": "s", "idle_timeout": None}, "expected float, got NoneType @ payload.idle"),
        (
            {"session_id": "s", "spec": {"network_allowed_hosts": "a.example"}},
            "expected a list, got str @ payload.spec.network_allowed_hosts",
        ),
    ],
)
def test_a_wrong_typed_field_is_invalid_input_naming_it(document: object, problem: str) -> None:
    """Values of the wrong JSON type are refused, not coerced ('5' is no number, 5 no text)."""
    with pytest.raises(InvalidInput, match="SessionWorkflowInput") as caught:
        data_converter.payload_converter.from_payloads([_payload(document)], [SessionWorkflowInput])
    assert problem in str(caught.value)


def test_a_spec_travels_as_its_canonical_document() -> None:
    """The spec in a payload is the document its hash is computed from; a full one reads back."""
    spec = SandboxSpec(timeout=30.0, network=NetworkMode.BRIDGE)
    [payload] = data_converter.payload_converter.to_payloads(
        [ToolStepInput("s", ToolCall("x"), spec)]
    )
    assert json.loads(payload.data)["spec"] == {"network": "bridge", "timeout": 30}
    full = {
        "session_id": "s",
        "call": {"name": "x", "arguments": {}},
        "spec": {
            "timeout": 30.0,
            "image": None,
            "memory": None,
            "cpus": None,
            "network": "bridge",
            "pids_limit": None,
            "network_allowed_hosts": [],
            "setup_network_allowed_hosts": [],
            "packages": {"apt": [], "cargo": [], "gem": [], "go": [], "npm": [], "pip": []},
        },
    }
    [read] = data_converter.payload_converter.from_payloads([_payload(full)], [ToolStepInput])
    assert read.spec == spec
