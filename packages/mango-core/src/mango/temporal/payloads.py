"""Temporal payloads as JSON, converted by mango's one edge converter.

:data:`data_converter` is what every mango client and worker uses. Values
are unstructured by :data:`mango.app.converter.converter` (attrs classes
become objects, ``bytes`` base85 strings, enums their values, tuples lists,
a spec its canonical document) and written with the standard ``json/plain``
encoding; on the way back the declared type hint is structured by the same
converter, so attrs validators run, and an unknown field, a wrong-typed value
or a bad one raises :class:`~mango.domain.errors.InvalidInput` naming every
field at fault. Hints the converter does not know (SDK internals) fall back
to temporalio's own JSON conversion.
"""

from __future__ import annotations

import json
from typing import Any

import cattrs
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    BinaryProtoPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    JSONProtoPayloadConverter,
)

from mango.app.converter import converter, structure
from mango.domain.errors import InvalidInput

__all__ = [
    "CattrsJSONPayloadConverter",
    "MangoPayloadConverter",
    "converter",
    "data_converter",
]

_ENCODING = "json/plain"


class CattrsJSONPayloadConverter(EncodingPayloadConverter):
    """``json/plain`` payloads: cattrs for structure, the standard library for JSON."""

    def __init__(self) -> None:
        """Create the converter; SDK-internal types fall back to temporalio's JSON converter."""
        self._fallback = JSONPlainPayloadConverter()

    @property
    def encoding(self) -> str:
        """``json/plain``, readable by every Temporal SDK and the UI."""
        return _ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        """Unstructure ``value`` with cattrs and write it as compact, key-sorted JSON."""
        try:
            data = json.dumps(
                converter.unstructure(value), separators=(",", ":"), sort_keys=True
            ).encode()
        except TypeError:
            return self._fallback.to_payload(value)
        return Payload(metadata={"encoding": _ENCODING.encode()}, data=data)

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """Parse JSON and structure it as ``type_hint``; :class:`InvalidInput` if it cannot."""
        if type_hint is None or type_hint is Any:
            return self._fallback.from_payload(payload, type_hint)
        try:
            raw = json.loads(payload.data)
        except ValueError as exc:
            raise InvalidInput(f"payload is not JSON: {exc}") from exc
        name = getattr(type_hint, "__name__", str(type_hint))
        try:
            return structure(raw, type_hint, what=f"a {name} payload", path="payload")
        except cattrs.StructureHandlerNotFoundError:
            return self._fallback.from_payload(payload, type_hint)


class MangoPayloadConverter(CompositePayloadConverter):
    """temporalio's default converters with cattrs JSON in place of the plain JSON one."""

    def __init__(self) -> None:
        """Assemble the encoding converters; the JSON one stays last, as it accepts anything."""
        super().__init__(
            BinaryNullPayloadConverter(),
            BinaryPlainPayloadConverter(),
            JSONProtoPayloadConverter(),
            BinaryProtoPayloadConverter(),
            CattrsJSONPayloadConverter(),
        )


data_converter = DataConverter(payload_converter_class=MangoPayloadConverter)
"""The data converter of every mango Temporal client and worker."""
