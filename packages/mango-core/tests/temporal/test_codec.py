"""Encrypted Temporal payloads: the history holds no command, output or error text."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload

from mango.app import SessionManager
from mango.app.tools import ToolFailed
from mango.config import PAYLOAD_KEYS_ENV, PayloadKey, payload_keys
from mango.domain import BindingStore, ConfigurationError
from mango.domain.values import Command
from mango.local import LocalProvider
from mango.temporal import MangoActivities, Orchestrator, connect, serve, session_workflow_id
from mango.temporal.codec import ENCODING, EncryptionCodec, RefuseEncrypted
from mango.temporal.messages import ToolCall

from .support import FAST_POLICY

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]


def _key(key_id: str) -> PayloadKey:
    return PayloadKey(key_id, os.urandom(32))


def _setting(*keys: PayloadKey) -> str:
    return ",".join(f"{k.key_id}:{base64.b64encode(k.secret).decode()}" for k in keys)


def test_payload_keys_parse_and_never_echo_key_material() -> None:
    """The first key encrypts; malformed entries name the variable and id, not the key."""
    new, old = _key("k2"), _key("k1")
    assert payload_keys({PAYLOAD_KEYS_ENV: _setting(new, old)}) == (new, old)
    urlsafe = base64.urlsafe_b64encode(new.secret).decode().rstrip("=")
    assert payload_keys({PAYLOAD_KEYS_ENV: f"k2:{urlsafe}"}) == (new,)
    assert payload_keys({}) == ()
    short = base64.b64encode(b"s3cr3t-material").decode()
    for value, fragment in (
        (f"k1:{short}", "key 'k1' must be 32 bytes"),
        ("no-colon", "entry 1 must be 'id:base64key'"),
        (f"{_setting(old)},{_setting(old)}", "listed twice"),
        ("bad id:AAAA", "entry 1"),
    ):
        with pytest.raises(ConfigurationError, match=PAYLOAD_KEYS_ENV) as caught:
            payload_keys({PAYLOAD_KEYS_ENV: value})
        assert fragment in str(caught.value)
        assert short not in str(caught.value)
        assert short not in repr(PayloadKey("k", b"x" * 32))


async def test_codec_round_trip_rotation_and_tamper() -> None:
    """Old keys still decrypt after rotation; an unknown or altered payload fails clearly."""
    old, new = _key("old"), _key("new")
    plain = [Payload(metadata={"encoding": b"json/plain"}, data=b'{"argv":["echo","hi"]}')]
    sealed_old = await EncryptionCodec([old]).encode(plain)
    assert sealed_old[0].metadata["encoding"] == ENCODING
    assert b"echo" not in sealed_old[0].SerializeToString()
    rotated = EncryptionCodec([new, old])
    assert await rotated.decode(sealed_old) == plain
    assert (await rotated.encode(plain))[0].metadata["encryption-key-id"] == b"new"
    assert await rotated.decode(plain) == plain  # histories from before the key
    with pytest.raises(ConfigurationError, match="key 'old'"):
        await EncryptionCodec([new]).decode(sealed_old)
    tampered = Payload()
    tampered.CopyFrom(sealed_old[0])
    tampered.data = tampered.data[:-1] + bytes([tampered.data[-1] ^ 1])
    with pytest.raises(ConfigurationError, match="does not verify"):
        await rotated.decode([tampered])


async def test_history_holds_only_ciphertext(
    temporal_address: str, store: BindingStore, tmp_path: Path, queue_prefix: str
) -> None:
    """A tool step's argv, output and failure text never appear in the stored history."""
    keys = (_key("k1"),)
    client = await connect(temporal_address, payload_keys=keys)
    plain_client = await connect(temporal_address)
    marker = f"marker-{os.urandom(6).hex()}"
    activities = MangoActivities(
        SessionManager(LocalProvider(tmp_path / "sandboxes"), store),
        store,
        client,
        task_queue_prefix=queue_prefix,
        heartbeat_interval=0.2,
    )
    orchestrator = Orchestrator(
        client, store, "local", task_queue_prefix=queue_prefix, policy=FAST_POLICY
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(
        serve(client, activities, stop=stop, graceful_shutdown=2.0, on_ready=ready.set)
    )
    await asyncio.wait_for(ready.wait(), 60)
    session = f"{queue_prefix}-codec"
    try:
        result = await orchestrator.run_tool(
            session, ToolCall("bash", {"command": f"echo {marker}"})
        )
        assert marker in result.output
        with pytest.raises(ToolFailed):
            await orchestrator.run_tool(
                session,
                ToolCall("edit", {"path": f"{marker}.txt", "old_string": "a", "new_string": "b"}),
            )
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
    history = await plain_client.get_workflow_handle(session_workflow_id(session)).fetch_history()
    # Serialized protobuf: payload bytes appear as they are stored (no base64 in between).
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert marker.encode() not in raw
    sealed = [p for event in history.events for p in _payloads(event)]
    assert sealed
    assert all(payload.metadata["encoding"] == ENCODING for payload in sealed)
    # The ciphertext decodes with the key: the marker was really in the history.
    opened = await EncryptionCodec(keys).decode(sealed)
    assert any(marker.encode() in payload.data for payload in opened)


def _payloads(message: Message) -> list[Payload]:
    """Every Payload inside a protobuf message, depth first."""
    found: list[Payload] = []
    for _field, value in message.ListFields():
        if isinstance(value, Message):
            items = [value]
        elif hasattr(value, "values"):  # map fields
            items = list(value.values())
        elif isinstance(value, str | bytes | int | float):
            continue
        else:  # repeated fields
            items = list(value)
        for item in items:
            if isinstance(item, Payload):
                found.append(item)
            elif isinstance(item, Message):
                found.extend(_payloads(item))
    return found


async def test_a_client_without_the_workers_keys_gets_one_clear_error(
    temporal_address: str, store: BindingStore, tmp_path: Path, queue_prefix: str
) -> None:
    """No MANGO_TEMPORAL_PAYLOAD_KEYS here, keys on the worker: a ConfigurationError naming
    the key and the setting (the SDK's 'unknown payload encoding' KeyError before)."""
    keyed = await connect(temporal_address, payload_keys=(_key("k1"),))
    plain = await connect(temporal_address)
    activities = MangoActivities(
        SessionManager(LocalProvider(tmp_path / "sandboxes"), store),
        store,
        keyed,
        task_queue_prefix=queue_prefix,
        heartbeat_interval=0.2,
    )
    orchestrator = Orchestrator(
        plain, store, "local", task_queue_prefix=queue_prefix, policy=FAST_POLICY
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(
        serve(keyed, activities, stop=stop, graceful_shutdown=2.0, on_ready=ready.set)
    )
    await asyncio.wait_for(ready.wait(), 60)
    try:
        with pytest.raises(ConfigurationError) as caught:
            await orchestrator.run_tool(
                f"{queue_prefix}-nokeys", ToolCall("bash", {"command": "echo hi"})
            )
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
    assert str(caught.value) == (
        "a Temporal payload is encrypted with key 'k1', but MANGO_TEMPORAL_PAYLOAD_KEYS is "
        "not set in this process"
    )
    assert caught.value.hint is not None
    assert "the same MANGO_TEMPORAL_PAYLOAD_KEYS" in caught.value.hint


async def test_refuse_encrypted_passes_plain_payloads() -> None:
    """Without keys, plain payloads are untouched both ways; an encrypted one is refused."""
    plain = [Payload(metadata={"encoding": b"json/plain"}, data=b"{}")]
    assert await RefuseEncrypted().encode(plain) == plain
    assert await RefuseEncrypted().decode(plain) == plain
    sealed = await EncryptionCodec([_key("k9")]).encode(plain)
    with pytest.raises(ConfigurationError, match="key 'k9'"):
        await RefuseEncrypted().decode(sealed)


async def test_a_client_with_another_key_gets_one_clear_error(
    temporal_address: str, store: BindingStore, tmp_path: Path, queue_prefix: str
) -> None:
    """Client and worker with different keys: the client hears of the mismatch while it
    waits (the worker cannot open the step), not only when --max-wait runs out."""
    keyed = await connect(temporal_address, payload_keys=(_key("k1"),))
    other = await connect(temporal_address, payload_keys=(_key("k2"),))
    activities = MangoActivities(
        SessionManager(LocalProvider(tmp_path / "sandboxes"), store),
        store,
        keyed,
        task_queue_prefix=queue_prefix,
        heartbeat_interval=0.2,
    )
    orchestrator = Orchestrator(
        other, store, "local", task_queue_prefix=queue_prefix, policy=FAST_POLICY
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(
        serve(keyed, activities, stop=stop, graceful_shutdown=2.0, on_ready=ready.set)
    )
    await asyncio.wait_for(ready.wait(), 60)
    try:
        with pytest.raises(ConfigurationError) as caught:
            await orchestrator.exec(
                f"{queue_prefix}-otherkey", Command(("echo", "hi")), max_wait=600
            )
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
    message = str(caught.value)
    assert message.startswith(
        "the worker cannot run this step: MANGO_TEMPORAL_PAYLOAD_KEYS differs between this "
        "process and the worker ("
    ), message
    # What the worker recorded is encrypted with its key, which this client does not have.
    assert "key 'k1'" in message, message
    assert caught.value.hint is not None
    assert "the same MANGO_TEMPORAL_PAYLOAD_KEYS" in caught.value.hint
