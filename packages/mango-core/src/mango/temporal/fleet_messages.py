"""The inputs and outputs of the fleet's scheduled workflows and their activities.

The same rules as :mod:`mango.temporal.messages`: attrs values through the one
edge converter; a new field gets a default, so recorded histories replay.
"""

from __future__ import annotations

from typing import Any

import attrs

from mango.app.converter import converter
from mango.app.session_manager import EvictionReport
from mango.app.sweep import Outcome, SweepReport
from mango.domain.errors import InvalidInput

__all__ = ["EvictionInput", "EvictionReport", "SweepInput", "SweepSummary"]


def _seconds(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise InvalidInput(f"{attribute.name} must be a non-negative number, got {value!r}")


def _count(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class SweepInput:
    """One orphan sweep of this worker's provider, destroying what it finds."""

    older_than: float = attrs.field(default=3600.0, validator=_seconds)
    """Only unclaimed resources at least this old are orphans (``MANGO_GC_OLDER_THAN``)."""
    attempt_timeout: float = attrs.field(default=600.0, validator=_seconds)


@attrs.frozen
class SweepSummary:
    """What one scheduled sweep did (the full report is in the worker's log)."""

    provider: str
    listed: int
    claimed: int
    orphans: int
    destroyed: int
    failed: int = 0
    """Orphans whose removal failed (the one that met an unavailable provider included)."""
    stopped: str | None = None
    """Why the pass stopped early (the provider became unavailable): nothing more removed."""

    @property
    def ok(self) -> bool:
        """True when the sweep ran to the end and nothing failed."""
        return self.stopped is None and not self.failed

    @classmethod
    def of(cls, report: SweepReport) -> SweepSummary:
        """The summary of ``report``."""
        return cls(
            provider=report.provider,
            listed=report.listed,
            claimed=report.claimed,
            orphans=len(report.orphans),
            destroyed=report.destroyed,
            failed=sum(1 for item in report.items if item.outcome is Outcome.FAILED),
            stopped=report.stopped,
        )


@attrs.frozen
class EvictionInput:
    """One idle eviction pass of this worker's provider."""

    idle_for: float = attrs.field(validator=_seconds)
    """Sessions unused this long lose their sandbox (``MANGO_EVICT_IDLE_AFTER``)."""
    batch: int = attrs.field(default=100, validator=_count)
    attempt_timeout: float = attrs.field(default=600.0, validator=_seconds)


def warm_up() -> None:
    """Build the cattrs hooks outside the workflow sandbox (see :mod:`mango.temporal.messages`)."""
    for cls in (SweepInput, SweepSummary, EvictionInput, EvictionReport):
        attrs.resolve_types(cls)
        converter.get_structure_hook(cls)
        converter.get_unstructure_hook(cls)
