"""The figures a benchmark reports, in one shape, so ``run.py`` can put them in one table.

Every benchmark script still prints its own lines; it also calls
:func:`report` for each figure. When ``MANGO_BENCH_FIGURES`` names a file
(``run.py`` sets it for each script it runs), each figure is appended to it
as one JSON line; otherwise :func:`report` does nothing more.

A figure is mango's value against a baseline's (what the same thing costs
without mango: the vendor's SDK, the daemon's CLI, bare asyncio, Temporal's
own floor), in one unit, with an optional goal on the ratio
(``mango / baseline``) or on mango's value itself.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

FIGURES_ENV = "MANGO_BENCH_FIGURES"
"""The file each reported figure is appended to (one JSON object per line)."""


@dataclass(frozen=True)
class Goal:
    """``on`` (``"ratio"`` or ``"mango"``) must be ``op`` (``"<="`` or ``"<"``) ``limit``."""

    on: str
    op: str
    limit: float

    def met(self, mango: float | None, ratio: float | None) -> bool | None:
        """Whether the figure meets the goal; None when its value is missing."""
        value = ratio if self.on == "ratio" else mango
        if value is None:
            return None
        return value <= self.limit if self.op == "<=" else value < self.limit

    def text(self, unit: str) -> str:
        """``ratio <= 1.05`` or ``< 32 MiB``."""
        if self.on == "ratio":
            return f"ratio {self.op} {self.limit:g}"
        return f"{self.op} {self.limit:g} {unit}"


def ratio_at_most(limit: float) -> Goal:
    """The goal ``mango / baseline <= limit``."""
    return Goal("ratio", "<=", limit)


def value_at_most(limit: float) -> Goal:
    """The goal ``mango <= limit`` (in the figure's unit)."""
    return Goal("mango", "<=", limit)


def value_below(limit: float) -> Goal:
    """The goal ``mango < limit`` (in the figure's unit)."""
    return Goal("mango", "<", limit)


@dataclass(frozen=True)
class Figure:
    """One row of the table."""

    name: str
    mango: float | None
    baseline: float | None
    unit: str
    goal: Goal | None = None

    @property
    def ratio(self) -> float | None:
        """``mango / baseline``, when both are there."""
        if self.mango is None or self.baseline is None or self.baseline == 0:
            return None
        return self.mango / self.baseline

    @property
    def met(self) -> bool | None:
        """Whether the goal is met (None: no goal, or no value)."""
        return None if self.goal is None else self.goal.met(self.mango, self.ratio)

    def row(self) -> dict[str, object]:
        """The JSON row: name, mango, baseline, ratio, goal (text or null), unit, met."""
        return {
            "name": self.name,
            "mango": self.mango,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "goal": None if self.goal is None else self.goal.text(self.unit),
            "unit": self.unit,
            "met": self.met,
        }

    def dump(self) -> str:
        """One JSON line that :meth:`load` reads back."""
        data = asdict(self)
        return json.dumps(data)

    @classmethod
    def load(cls, line: str) -> Figure:
        """The figure :meth:`dump` wrote."""
        data = json.loads(line)
        goal = data.pop("goal")
        return cls(**data, goal=None if goal is None else Goal(**goal))


def report(
    name: str,
    *,
    mango: float | None,
    baseline: float | None = None,
    unit: str,
    goal: Goal | None = None,
) -> Figure:
    """Record one figure for ``run.py`` (if it asked) and return it."""
    figure = Figure(name, mango, baseline, unit, goal)
    target = os.environ.get(FIGURES_ENV, "").strip()
    if target:
        with Path(target).open("a", encoding="utf-8") as sink:
            sink.write(figure.dump() + "\n")
    return figure


def load_all(path: Path) -> list[Figure]:
    """Every figure appended to ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    return [Figure.load(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def spawn_medians(
    commands: Mapping[str, Sequence[str]],
    rounds: int,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Median milliseconds of each command run to its exit on this machine, in turn.

    What a vendor's sandbox would run for one command, run here instead: the
    in-sandbox part of a remote exec (a fake's sandboxes are local processes
    too), without the protocol. Output is discarded; a failing command raises.
    """
    for _ in range(3):
        for argv in commands.values():
            subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True)
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}
