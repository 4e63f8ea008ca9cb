"""Waiver files: known non-conformance, declared with a reason.

One waiver per line: a substring of a pytest node id, then ``#`` and the
reason. Blank lines and lines starting with ``#`` are comments::

    # mango-conformance waivers for acme
    test_l02g_precancelled  # acme's SDK cannot abort a request in flight (ACME-123)
    TestAcme::test_lifecycle_state_machine  # flaky create latency, tracked in #42

A waived test is skipped with its reason. A waiver that matches no collected
test of the suite is *stale*: it is reported, and ``--mango-strict`` fails
the run on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import attrs

__all__ = ["Waiver", "WaiverError", "match_waiver", "parse_waivers", "read_waivers"]


class WaiverError(ValueError):
    """A waiver file is malformed; the message names the line."""


@attrs.frozen
class Waiver:
    """One waiver: a node-id substring and why it is waived."""

    pattern: str
    reason: str
    line: int = 0


def parse_waivers(text: str, *, source: str = "<waivers>") -> tuple[Waiver, ...]:
    """Parse waiver lines; raise :class:`WaiverError` for a line without a reason."""
    waivers: list[Waiver] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, sep, reason = line.partition("#")
        pattern, reason = pattern.strip(), reason.strip()
        if not sep or not reason:
            raise WaiverError(
                f"{source}:{number}: waiver {pattern!r} has no reason; write '<node-id> # <why>'"
            )
        if " " in pattern:
            raise WaiverError(f"{source}:{number}: waiver {pattern!r} contains a space")
        waivers.append(Waiver(pattern=pattern, reason=reason, line=number))
    return tuple(waivers)


def read_waivers(path: Path) -> tuple[Waiver, ...]:
    """Read and parse a waiver file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WaiverError(f"cannot read the waiver file {path}: {exc}") from exc
    return parse_waivers(text, source=str(path))


def match_waiver(nodeid: str, waivers: Iterable[Waiver]) -> Waiver | None:
    """The first waiver whose pattern occurs in ``nodeid``, if any."""
    for waiver in waivers:
        if waiver.pattern in nodeid:
            return waiver
    return None
