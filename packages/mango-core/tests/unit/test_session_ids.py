"""Session ids are NFC: a spelling that prints like another id is refused at every boundary."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import attrs
import pytest
from temporalio.api.common.v1 import Payload

from mango.app import InMemoryBindingStore, SessionManager
from mango.app.tools import ToolCall
from mango.domain import InvalidInput, SandboxSpec, validate_session_id
from mango.local import LocalProvider
from mango.provider.ownership import Ownership
from mango.temporal.messages import SessionWorkflowInput, ToolStepInput
from mango.temporal.payloads import data_converter

NFC = "caf\u00e9"
NFD = "cafe\u0301"


def test_the_two_spellings_print_alike_and_differ() -> None:
    """The premise: NFC and NFD ``café`` look the same and are different strings."""
    assert unicodedata.normalize("NFC", NFD) == NFC
    assert NFD != NFC


def test_an_nfd_id_is_refused_naming_its_nfc_spelling() -> None:
    """The error shows both spellings in a form where they differ."""
    with pytest.raises(InvalidInput, match="normal form NFC") as caught:
        validate_session_id(NFD)
    assert ascii(NFD) in str(caught.value)
    assert ascii(NFC) in str(caught.value)


@pytest.mark.parametrize("session_id", [NFC, "A\u030a", "\u212b", "e\u0301\u0301", "\uac00\u11a8"])
def test_only_nfc_spellings_are_accepted(session_id: str) -> None:
    """Whatever the script, an id is accepted exactly when it is its own NFC form."""
    if unicodedata.normalize("NFC", session_id) == session_id:
        assert validate_session_id(session_id) == session_id
    else:
        with pytest.raises(InvalidInput, match="NFC"):
            validate_session_id(session_id)


def test_providers_refuse_an_nfd_key() -> None:
    """Ownership names and labels (every provider's identity) refuse the NFD spelling."""
    ownership = Ownership("local", "ns")
    with pytest.raises(InvalidInput, match="NFC"):
        ownership.name(NFD)
    with pytest.raises(InvalidInput, match="NFC"):
        ownership.labels(NFD)


async def test_the_python_api_refuses_an_nfd_id_and_creates_nothing(tmp_path: Path) -> None:
    """Every SessionManager call taking an id refuses NFD; the NFC spelling is one Session."""
    store = InMemoryBindingStore()
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes", namespace="ids"), store)
    spec = SandboxSpec()
    calls = [
        lambda: manager.ensure_session(NFD),
        lambda: manager.observe(NFD),
        lambda: manager.acquire(NFD, spec),
        lambda: manager.acquire_existing(NFD, spec),
        lambda: manager.release(NFD),
        lambda: manager.delete_session(NFD),
    ]
    for call in calls:
        with pytest.raises(InvalidInput, match="NFC"):
            await call()
    assert not (tmp_path / "sandboxes").exists()
    assert await store.list_sessions(10) == []
    try:
        await manager.ensure_session(NFC)
        await manager.acquire(NFC, spec)
        assert [record.session_id for record in await store.list_sessions(10)] == [NFC]
    finally:
        assert await manager.delete_session(NFC) is True
        await manager.aclose()


@pytest.mark.parametrize(
    "message",
    [
        SessionWorkflowInput(session_id=NFC),
        ToolStepInput(session_id=NFC, call=ToolCall("bash", {})),
    ],
    ids=lambda message: type(message).__name__,
)
def test_a_temporal_payload_with_an_nfd_id_is_refused(message: object) -> None:
    """A payload whose session_id is NFD does not decode (a workflow never sees it)."""
    with pytest.raises(InvalidInput, match="NFC"):
        type(message)(**{**_fields(message), "session_id": NFD})
    converter = data_converter.payload_converter
    [payload] = converter.to_payloads([message])
    document = json.loads(payload.data)
    document["session_id"] = NFD
    forged = Payload(metadata=payload.metadata, data=json.dumps(document).encode())
    with pytest.raises(InvalidInput, match="NFC"):
        converter.from_payloads([forged], [type(message)])


def _fields(message: object) -> dict[str, object]:
    return attrs.asdict(message, recurse=False)  # type: ignore[arg-type]
