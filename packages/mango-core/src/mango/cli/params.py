"""Option types the commands share.

click's ``FloatRange`` admits ``nan`` (every comparison with it is false) and
``inf``: a duration must be a finite number, and its error names the option.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import click

__all__ = ["Seconds"]

if TYPE_CHECKING:
    _FloatType = click.ParamType[float]
else:  # generic in newer click only
    _FloatType = click.ParamType


class Seconds(_FloatType):
    """A finite number of seconds, greater than ``minimum`` (or at least it, ``open=False``)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, *, open_: bool = True) -> None:
        self.minimum = minimum
        self.open = open_

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """``value`` as a float, or click's usage error saying what a valid one is."""
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(str(value))
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        bound = f"(more than {self.minimum:g})" if self.open else f"({self.minimum:g} or more)"
        too_small = number <= self.minimum if self.open else number < self.minimum
        if not math.isfinite(number) or too_small:
            self.fail(f"{value!r} is not a finite number of seconds {bound}", param, ctx)
        return number

    def get_metavar(
        self,
        param: click.Parameter,  # noqa: ARG002
        ctx: click.Context | None = None,  # noqa: ARG002
    ) -> str:
        """``SECONDS`` in the usage line."""
        return "SECONDS"
