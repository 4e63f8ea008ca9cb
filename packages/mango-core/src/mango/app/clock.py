"""Clocks: the system clock and a manual one for tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

__all__ = ["ManualClock", "SystemClock"]


class SystemClock:
    """The real wall clock, in UTC."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


@attrs.define
class ManualClock:
    """A clock that moves only when told to; strictly increasing on each read."""

    current: datetime = attrs.field(factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    step: timedelta = timedelta(microseconds=1)

    def now(self) -> datetime:
        """Return the current time, then advance by ``step`` so reads are ordered."""
        value = self.current
        self.current = value + self.step
        return value

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward."""
        self.current += delta
