"""Encryption of Temporal payloads: commands and their output never rest in plain text.

Everything a tool step carries (argv, ``env``, stdin, output, file contents)
travels in Temporal payloads and is stored in the workflow history. Without a
codec the history holds it in plain text (the embedded dev server keeps it in a
SQLite file under the state directory). With ``MANGO_TEMPORAL_PAYLOAD_KEYS``
set, every payload and every failure message is encrypted with AES-256-GCM
before it leaves the process, so the server and its database see only
ciphertext.

Key rotation: the setting is a comma-separated list of ``id:key`` pairs (key:
32 random bytes, base64). The **first** key encrypts; every listed key can
decrypt (the key id travels in the payload's metadata). To rotate, put a new
key first and keep the old one listed until no open workflow history needs it
(the longest retention of your namespace), then drop it. A payload whose key
is not listed fails to decode with an error naming the key id only.

A process without the setting still recognises encrypted payloads
(:class:`RefuseEncrypted`): a ``--via-temporal`` client without the keys its
worker uses gets one error naming the mismatch, not an "unknown payload
encoding" ``KeyError`` from the SDK.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from mango.config import PayloadKey
from mango.domain.errors import ConfigurationError
from mango.temporal.payloads import data_converter

__all__ = ["ENCODING", "EncryptionCodec", "RefuseEncrypted", "converter_for"]

ENCODING = b"binary/encrypted"
"""The ``encoding`` metadata of an encrypted payload."""
_KEY_ID = "encryption-key-id"
_NONCE_BYTES = 12


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialized payloads; the first key encrypts, all decrypt."""

    def __init__(self, keys: Sequence[PayloadKey]) -> None:
        if not keys:
            raise ConfigurationError("the payload codec needs at least one key")
        self._current = keys[0]
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload (metadata and data) under the current key."""
        cipher = self._ciphers[self._current.key_id]
        key_id = self._current.key_id.encode("ascii")
        encoded = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), key_id)
            encoded.append(
                Payload(
                    metadata={"encoding": ENCODING, _KEY_ID: key_id},
                    data=nonce + sealed,
                )
            )
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt encrypted payloads; others pass through (histories from before the key)."""
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                decoded.append(payload)
                continue
            key_id = payload.metadata.get(_KEY_ID, b"").decode("ascii", "replace")
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise ConfigurationError(
                    f"a Temporal payload is encrypted with key {key_id!r}, "
                    "which MANGO_TEMPORAL_PAYLOAD_KEYS does not list",
                    hint="keep retired keys listed (after the current one) until no "
                    "history needs them",
                )
            nonce, sealed = payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:]
            try:
                plain = cipher.decrypt(nonce, sealed, key_id.encode("ascii"))
            except InvalidTag:
                raise ConfigurationError(
                    f"a Temporal payload encrypted with key {key_id!r} does not verify: "
                    "the key under that id differs from the one that encrypted it, "
                    "or the payload was altered"
                ) from None
            inner = Payload()
            inner.ParseFromString(plain)
            decoded.append(inner)
        return decoded


class RefuseEncrypted(PayloadCodec):
    """The codec of a process without keys: plain payloads pass, an encrypted one is refused."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Payloads as they are."""
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Payloads as they are; :class:`ConfigurationError` naming the key for an encrypted one."""
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                key_id = payload.metadata.get(_KEY_ID, b"").decode("ascii", "replace")
                raise ConfigurationError(
                    f"a Temporal payload is encrypted with key {key_id!r}, but "
                    "MANGO_TEMPORAL_PAYLOAD_KEYS is not set in this process",
                    hint="give every mango process on this Temporal namespace (clients and "
                    "workers) the same MANGO_TEMPORAL_PAYLOAD_KEYS",
                )
        return list(payloads)


def converter_for(keys: Sequence[PayloadKey]) -> DataConverter:
    """mango's data converter, encrypting payloads and failure messages when keys are given.

    Without keys nothing is encrypted, and an encrypted payload is refused
    with a clear error (:class:`RefuseEncrypted`).
    """
    if not keys:
        return dataclasses.replace(data_converter, payload_codec=RefuseEncrypted())
    return dataclasses.replace(
        data_converter,
        payload_codec=EncryptionCodec(keys),
        # Failure messages and stack traces can quote commands or output: move
        # them into the encoded attributes so the codec covers them too.
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
