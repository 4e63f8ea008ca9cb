"""The one cattrs converter at mango's edges, and its strict variant for tool arguments.

Every value that leaves or enters the process as data goes through
:data:`converter`: PostgreSQL rows (read by column name), the spec stored with
an intent, and Temporal payloads. It lives here, in the application layer,
because the domain may not import cattrs (the "domain stays pure" contract)
while every user of it sits at or above this layer: the PostgreSQL and
Temporal adapters, and the built-in agent tools.

What it does at an edge, whichever edge:

* an attrs class becomes an object of its fields, an enum its value, a tuple
  a list, ``bytes`` a base85 string, a ``datetime`` ISO 8601 text;
* a spec (:class:`~mango.domain.values.SandboxSpec`, and its
  :class:`~mango.domain.values.PackagePlan`) becomes its *canonical document*,
  :func:`mango.domain.hashing.canonical_form`: the very value its hash is
  computed from, with the fields at their default left out. The domain
  produces that document (it needs no library), the converter reuses it, so
  the stored spec, the spec in a payload and the hash input cannot drift
  apart. A document with every field (what earlier releases stored) reads
  back the same;
* on the way in, a field the class does not have, and a value of the wrong
  JSON type (``"5"`` for a number, ``1`` for text, ``true`` for an integer,
  one string for a list), are refused instead of coerced or dropped, and
  attrs validators run. :func:`structure` turns every such failure into one
  :class:`~mango.domain.errors.InvalidInput` naming each field at fault.

:data:`strict_converter` applies the same refusals to what a model writes as
tool arguments: plain JSON only, with none of mango's own encodings (no
base85 bytes, no timestamps).
"""

from __future__ import annotations

from base64 import b85decode, b85encode
from datetime import UTC, datetime
from typing import Any, TypeVar, get_args, get_origin

import cattrs
from cattrs.cols import (
    homogenous_tuple_structure_factory,
    is_mapping,
    is_mutable_sequence,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.dispatch import StructureHook
from cattrs.v import format_exception

from mango.domain.errors import InvalidInput, MangoError
from mango.domain.hashing import canonical_form
from mango.domain.values import PackagePlan, SandboxSpec

__all__ = ["converter", "describe", "problems", "strict_converter", "structure"]

_T = TypeVar("_T")


def _exact_scalars(target: cattrs.Converter) -> None:
    """Scalars structure only from their own JSON type (an integer is also a number)."""

    def exact(kind: type[Any], accepted: tuple[type, ...]) -> None:
        def hook(value: Any, _type: Any) -> Any:
            if isinstance(value, bool) and bool not in accepted:
                raise TypeError(f"expected {kind.__name__}, got bool")
            if not isinstance(value, accepted):
                raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
            return kind(value)

        target.register_structure_hook(kind, hook)

    exact(str, (str,))
    exact(int, (int,))
    exact(float, (int, float))
    exact(bool, (bool,))


def _is_fixed_tuple(type_: Any) -> bool:
    args = get_args(type_)
    return get_origin(type_) is tuple and bool(args) and args[-1] is not Ellipsis


def _strict_containers(target: cattrs.Converter) -> None:
    """Sequences structure only from lists, mappings only from objects.

    cattrs would iterate any iterable: one string given for a list of strings
    would become a tuple of characters.
    """

    def guarded(inner: StructureHook, accepted: tuple[type, ...], what: str) -> StructureHook:
        def hook(value: Any, type_: Any) -> Any:
            if not isinstance(value, accepted):
                raise TypeError(f"expected {what}, got {type(value).__name__}")
            return inner(value, type_)

        return hook

    def sequence(type_: Any) -> StructureHook:
        if _is_fixed_tuple(type_):
            inner = target.gen_structure_hetero_tuple(type_)
        elif is_mutable_sequence(type_):
            inner = list_structure_factory(type_, target)
        else:
            inner = homogenous_tuple_structure_factory(type_, target)
        return guarded(inner, (list, tuple), "a list")

    def mapping(type_: Any) -> StructureHook:
        return guarded(mapping_structure_factory(type_, target), (dict,), "an object")

    target.register_structure_hook_factory(
        lambda type_: _is_fixed_tuple(type_) or (is_sequence(type_) and type_ not in (str, bytes)),
        sequence,
    )
    target.register_structure_hook_factory(is_mapping, mapping)


def _datetime(value: Any, _type: Any) -> datetime:
    """A timezone-aware instant, in UTC: a ``datetime`` (a row) or ISO 8601 text (JSON)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise TypeError(f"expected an ISO 8601 time, got {value!r}") from None
    if not isinstance(value, datetime):
        raise TypeError(f"expected a time, got {type(value).__name__}")
    if value.tzinfo is None:
        raise TypeError(f"expected a time with a time zone, got {value.isoformat()}")
    return value.astimezone(UTC)


def _bytes(value: Any, _type: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected base85 text, got {type(value).__name__}")
    try:
        return b85decode(value)
    except ValueError:
        raise TypeError("expected base85 text") from None


def _base() -> cattrs.Converter:
    strict = cattrs.Converter(forbid_extra_keys=True)
    _exact_scalars(strict)
    _strict_containers(strict)
    return strict


def _edge_converter() -> cattrs.Converter:
    edge = _base()
    edge.register_unstructure_hook(bytes, lambda value: b85encode(value).decode("ascii"))
    edge.register_structure_hook(bytes, _bytes)
    edge.register_unstructure_hook(datetime, lambda value: value.isoformat())
    edge.register_structure_hook(datetime, _datetime)
    for spec_type in (SandboxSpec, PackagePlan):
        edge.register_unstructure_hook(spec_type, canonical_form)
    return edge


converter: cattrs.Converter = _edge_converter()
"""The one converter for PostgreSQL rows, stored specs and Temporal payloads."""

strict_converter: cattrs.Converter = _base()
"""The converter for tool arguments: plain JSON, nothing unknown, nothing coerced."""


def describe(exc: BaseException, type_: Any) -> str:
    """One problem of a failed structuring, as :func:`cattrs.transform_error` lists it.

    mango's own errors (raised by validators) and the type errors of the hooks
    above already say what is wrong; the rest get cattrs's wording.
    """
    if isinstance(exc, MangoError | TypeError):
        return str(exc)
    return format_exception(exc, type_)


def problems(exc: Exception, path: str) -> list[str]:
    """Every problem in a structuring failure, each ending ``@ path.to.field``."""
    if isinstance(exc, cattrs.BaseValidationError):
        return cattrs.transform_error(exc, path=path, format_exception=describe)
    return [f"{describe(exc, None)} @ {path}"]


def structure(
    data: Any,
    type_: type[_T],
    *,
    what: str,
    path: str,
    using: cattrs.Converter = converter,
    hint: str | None = None,
) -> _T:
    """Structure ``data`` as ``type_``; :class:`InvalidInput` naming every field at fault.

    ``what`` names the value in the message (``"a stored provisioning
    intent"``), ``path`` is the root of the field paths (``"row"``,
    ``"payload"``). A type the converter has no hook for is a programming
    error and propagates as :class:`cattrs.StructureHandlerNotFoundError`.
    """
    try:
        return using.structure(data, type_)
    except cattrs.StructureHandlerNotFoundError:
        raise
    except Exception as exc:  # any failure to fit the type is bad input, named
        listed = "; ".join(problems(exc, path))
        raise InvalidInput(f"{what} is not valid: {listed}", hint=hint) from exc
