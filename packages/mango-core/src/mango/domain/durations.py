"""One grammar for durations an operator types: ``90``, ``90s``, ``30m``, ``2h``, ``7d``.

A bare number is seconds; a suffix (``s``, ``m``, ``h``, ``d``) scales it.
Fractions are allowed (``1.5h``); zero is allowed where the caller's minimum
allows it. Used by ``mango gc --older-than``; :func:`duration_setting` is
the same grammar for a setting that takes an age, so every one of them
reads the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from mango.domain.errors import ConfigurationError, InvalidInput

__all__ = ["duration_setting", "format_duration", "parse_duration"]

_DURATION = re.compile(r"\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhd]?)\s*\Z")
_SCALE = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds that ``text`` says; :class:`InvalidInput` naming ``what`` if it is not one."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(
            f"{what} must be a number of seconds or a number with s, m, h or d "
            f"(90, 90s, 30m, 2h, 7d), got {str(text)[:40]!r}"
        )
    seconds = float(match["number"]) * _SCALE[match["unit"]]
    if not math.isfinite(seconds):
        raise InvalidInput(f"{what} is too large, got {text[:40]!r}")
    return seconds


def duration_setting(
    env: Mapping[str, str], name: str, *, minimum: float, maximum: float
) -> float | None:
    """The duration setting ``name`` in seconds (None if unset), in ``[minimum, maximum]``.

    Raises :class:`ConfigurationError` naming the variable.
    """
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        seconds = parse_duration(text, what=name)
    except InvalidInput as exc:
        raise ConfigurationError(str(exc)) from None
    if not minimum <= seconds <= maximum:
        raise ConfigurationError(
            f"{name} must be from {format_duration(minimum)} to {format_duration(maximum)}, "
            f"got {text[:40]!r}"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """A short reading of ``seconds``: ``45s``, ``12m``, ``3h``, ``2d`` (rounded down)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
