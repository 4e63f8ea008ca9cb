"""The model of the lifecycle machine: Sessions, handles, limits and the file namespace."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import attrs
from hypothesis import note
from hypothesis.errors import InvalidArgument

from mango.provider import Sandbox, SandboxRef
from mango_conformance.profiles import Profile

__all__ = [
    "ALL_PATHS",
    "ESCAPES",
    "Handle",
    "MachineLimits",
    "SessionModel",
    "expect",
    "quiet_note",
    "short_repr",
]

_LEAVES = ("x.bin", "y.bin", "z.bin")
_DIRS: tuple[tuple[str, ...], ...] = (
    (),
    ("a",),
    ("b",),
    ("a", "a"),
    ("a", "b"),
    ("b", "a"),
    ("b", "b"),
)
ALL_PATHS: tuple[str, ...] = tuple(
    sorted("/".join((*dirs, leaf)) for dirs in _DIRS for leaf in _LEAVES)
)
"""The machine's file namespace: files end in ``.bin`` and directories never do, so no
generated file is ever a directory of another; ``skills/`` is never produced."""

ESCAPES = ("../{token}", "a/../../{token}", "a/b/../../../{token}", "/{token}")
"""Escaping path templates; ``{token}`` is unique per attempt."""


@attrs.frozen
class MachineLimits:
    """Cost levers of one machine run."""

    max_live_sandboxes: int = 4
    """Create is disabled while this many Sessions are live."""
    max_file_bytes: int = 256
    deep_checks: bool = True
    """Enables the rule that re-reads every file through a fresh client."""
    call_budget: int | None = None
    """After this many provider calls only model-only rules run."""
    max_clients: int = 3
    max_handles: int = 6

    @classmethod
    def from_profile(cls, profile: Profile) -> MachineLimits:
        """The limits a profile asks for."""
        return cls(
            max_live_sandboxes=profile.max_live_sandboxes,
            max_file_bytes=profile.max_file_bytes,
            deep_checks=profile.deep_checks,
            call_budget=profile.call_budget,
        )


@attrs.define
class Handle:
    """A sandbox client the machine holds for a Session, and where it came from."""

    client: int
    sandbox: Sandbox
    origin: str


@attrs.define
class SessionModel:
    """What the machine expects of one Session."""

    key: str
    ref: SandboxRef
    live: bool = True
    files: dict[str, bytes] = attrs.field(factory=dict)
    handles: list[Handle] = attrs.field(factory=list)


def expect(
    errors: tuple[type[BaseException], ...], action: Callable[[], object], what: str
) -> BaseException:
    """Run ``action``; return the error if it is one of ``errors``, else fail the step."""
    try:
        outcome = action()
    except errors as exc:
        return exc
    except Exception as exc:
        names = " or ".join(error.__name__ for error in errors)
        raise AssertionError(f"{what} raised {exc!r}, expected {names}") from exc
    names = " or ".join(error.__name__ for error in errors)
    raise AssertionError(f"{what} returned {short_repr(outcome)}, expected {names}")


def quiet_note(text: str) -> None:
    """``hypothesis.note`` when running under Hypothesis (steps can also be driven by hand)."""
    with contextlib.suppress(InvalidArgument):
        note(text)


def short_repr(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
