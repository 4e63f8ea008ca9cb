"""The one way every layer checks a number: attrs validators and the numeric-setting reader.

Values, providers, the kit and the settings modules all check their numbers
here, so a positive number means the same everywhere: ``bool`` is not a
number, NaN and infinities are refused, and the message names the field or
variable and the value. The provider surface re-exports these names
(:mod:`mango.provider`), so a provider distribution uses them without reaching
into the domain.

For attrs fields::

    timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_number)
    )
    attempts: int = attrs.field(default=5, validator=positive_int)

For settings read from an environment mapping, :func:`number_setting` checks
a range and raises :class:`~mango.domain.errors.ConfigurationError` naming
the variable, so an absurd value fails when the provider is opened, not later
inside a backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from mango.domain.errors import ConfigurationError, InvalidInput

__all__ = [
    "MAX_SETTING_SECONDS",
    "non_negative_number",
    "number_setting",
    "positive_int",
    "positive_number",
]

MAX_SETTING_SECONDS = 7 * 24 * 3600.0
"""The largest number of seconds a duration setting takes (a week)."""


def _finite(value: object) -> float | None:
    """``value`` as a float if it is a finite ``int`` or ``float`` (never ``bool``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def positive_number(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a finite number greater than zero (not ``bool``, NaN or infinite)."""
    number = _finite(value)
    if number is None or number <= 0:
        raise InvalidInput(f"{attribute.name} must be a finite positive number, got {value!r}")


def positive_int(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a whole number greater than zero (an ``int``, not ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{attribute.name} must be a positive integer, got {value!r}")


def non_negative_number(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a finite number that is zero or more (not ``bool``, NaN or infinite)."""
    number = _finite(value)
    if number is None or number < 0:
        raise InvalidInput(f"{attribute.name} must be a finite non-negative number, got {value!r}")


def number_setting(
    env: Mapping[str, str],
    name: str,
    *,
    minimum: float,
    maximum: float,
    integer: bool = False,
    unit: str = "",
) -> float | None:
    """Read the numeric setting ``name`` from ``env`` and check it lies in ``[minimum, maximum]``.

    Returns None when unset or empty (surrounding whitespace is ignored). NaN,
    infinities, values out of range and text that is not a number (a whole
    number with ``integer``) raise :class:`ConfigurationError` naming the
    variable and the accepted range.
    """
    text = env.get(name, "").strip()
    if not text:
        return None
    value: float | None
    try:
        value = int(text, 10) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not minimum <= value <= maximum:
        kind = "a whole number" if integer else "a number"
        suffix = f" {unit}" if unit else ""
        raise ConfigurationError(
            f"{name} must be {kind} from {_bound(minimum)} to {_bound(maximum)}{suffix}, "
            f"got {text[:40]!r}"
        )
    return value


def _bound(value: float) -> str:
    # Whole bounds in full (4194304, not 4.1943e+06); others as short as exact.
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
