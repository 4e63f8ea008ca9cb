"""Run profiles: how many examples and steps the lifecycle machine gets, and at what cost.

Four profiles, chosen with ``--mango-profile`` or ``MANGO_CONFORMANCE_PROFILE``:

================ ============ =========== ============ =========== ==========================
profile          examples x   container   derandomize  max live    notes
                 steps        or service
                              target
================ ============ =========== ============ =========== ==========================
``offline-dev``  200 x 50     30 x 40     no           4           deep checks, example DB
``offline-ci``   100 x 40     20 x 40     yes          4           deep checks, stable in CI
``live-smoke``   3 x 10       3 x 10      yes          2           no shrinking, 64-byte files
``live-nightly`` 12 x 20      12 x 20     no           3           shrinking, print_blob
================ ============ =========== ============ =========== ==========================

The budget follows the target's cost (``ConformanceTarget.cost``): a
container operation, or a remote provider's operation against its fake
(``TargetCost.SERVICE``: an HTTP request and a few process starts in the
sandbox), costs tens of milliseconds, so 200 examples of 50 steps would take
about eight minutes against Docker and longer against a fake under load; 30
of 40 take about one, and the whole default run of ``mango-conformance run
NAME`` stays under three minutes for every provider.
``--mango-max-examples`` and ``--mango-steps`` override either budget.

Every profile sets ``deadline=None`` (the whole machine run is one Hypothesis
example, so a deadline would bound the run, not a step) and suppresses the
``too_slow`` health check. Live profiles also set ``report_multiple_bugs=False``.

Each profile is registered with Hypothesis as ``mango-conformance-<name>``
(never loaded globally, so other Hypothesis tests of a project are untouched),
and every run gets its own example database per provider and profile (see
:func:`machine_settings`). Hypothesis ignores the database when
``derandomize`` is on, so the derandomized profiles replay from the
deterministic seed instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from mango.provider import TargetCost

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "PROFILE_ENV",
    "Profile",
    "hypothesis_profile_name",
    "machine_settings",
    "profile_from_env",
    "register_hypothesis_profiles",
]

PROFILE_ENV = "MANGO_CONFORMANCE_PROFILE"
"""Environment variable naming the default profile."""


@attrs.frozen
class Profile:
    """The cost settings of one kind of run."""

    name: str
    max_examples: int
    stateful_steps: int
    derandomize: bool
    phases: tuple[Phase, ...]
    max_live_sandboxes: int
    """Cap on live sandboxes per machine run: the main lever on create cost."""
    max_file_bytes: int
    """Largest payload the machine writes."""
    deep_checks: bool
    """Whether the machine may re-read every file through a fresh client."""
    live: bool
    """A live profile talks to a billable service."""
    call_budget: int | None
    """Provider calls per machine run after which provider-touching rules stop."""
    report_multiple_bugs: bool = True
    print_blob: bool = False
    container_budget: tuple[int, int] | None = None
    """``(max_examples, steps)`` for a :attr:`TargetCost.CONTAINER` or
    :attr:`TargetCost.SERVICE` target; None: the same as for a process target."""

    def budget(self, cost: TargetCost) -> tuple[int, int]:
        """``(max_examples, steps)`` of the lifecycle machine for a target of ``cost``."""
        if cost is not TargetCost.PROCESS and self.container_budget is not None:
            return self.container_budget
        return self.max_examples, self.stateful_steps


_ALL_PHASES = tuple(Phase)
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)

PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            name="offline-dev",
            max_examples=200,
            stateful_steps=50,
            derandomize=False,
            phases=_ALL_PHASES,
            max_live_sandboxes=4,
            max_file_bytes=256,
            deep_checks=True,
            live=False,
            call_budget=None,
            container_budget=(30, 40),
        ),
        Profile(
            name="offline-ci",
            max_examples=100,
            stateful_steps=40,
            derandomize=True,
            phases=_ALL_PHASES,
            max_live_sandboxes=4,
            max_file_bytes=256,
            deep_checks=True,
            live=False,
            call_budget=None,
            container_budget=(20, 40),
        ),
        Profile(
            name="live-smoke",
            max_examples=3,
            stateful_steps=10,
            derandomize=True,
            phases=_NO_SHRINK,
            max_live_sandboxes=2,
            max_file_bytes=64,
            deep_checks=False,
            live=True,
            call_budget=40,
            report_multiple_bugs=False,
        ),
        Profile(
            name="live-nightly",
            max_examples=12,
            stateful_steps=20,
            derandomize=False,
            phases=_ALL_PHASES,
            max_live_sandboxes=3,
            max_file_bytes=64,
            deep_checks=False,
            live=True,
            call_budget=80,
            report_multiple_bugs=False,
            print_blob=True,
        ),
    )
}
"""Every profile by name."""

DEFAULT_PROFILE = "offline-dev"


def profile_from_env() -> str:
    """The profile named by ``MANGO_CONFORMANCE_PROFILE``, else :data:`DEFAULT_PROFILE`."""
    return os.environ.get(PROFILE_ENV, "").strip() or DEFAULT_PROFILE


def hypothesis_profile_name(profile: Profile) -> str:
    """The name the profile is registered under with Hypothesis."""
    return f"mango-conformance-{profile.name}"


def _base_settings(profile: Profile) -> settings:
    return settings(
        max_examples=profile.max_examples,
        stateful_step_count=profile.stateful_steps,
        derandomize=profile.derandomize,
        phases=profile.phases,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        report_multiple_bugs=profile.report_multiple_bugs,
        print_blob=profile.print_blob,
        database=None,
    )


def register_hypothesis_profiles() -> None:
    """Register every profile with Hypothesis (idempotent; loads none of them)."""
    for profile in PROFILES.values():
        settings.register_profile(hypothesis_profile_name(profile), _base_settings(profile))


def machine_settings(
    profile: Profile,
    *,
    provider: str,
    database_dir: Path | None,
    max_examples: int | None = None,
    stateful_steps: int | None = None,
    shrink: bool = True,
    cost: TargetCost = TargetCost.PROCESS,
) -> settings:
    """Hypothesis settings for one machine run of ``provider`` under ``profile``.

    The example database lives in ``database_dir / "<provider>-<profile>"``,
    so examples never leak between providers or between offline and live
    runs. The budget is the profile's for a target of ``cost``;
    ``max_examples`` and ``stateful_steps`` override it; ``shrink=False``
    drops the shrink phase.
    """
    database = None
    if database_dir is not None and not profile.derandomize:
        database = DirectoryBasedExampleDatabase(database_dir / f"{provider}-{profile.name}")
    examples, steps = profile.budget(cost)
    return settings(
        _base_settings(profile),
        database=database,
        max_examples=examples if max_examples is None else max_examples,
        stateful_step_count=steps if stateful_steps is None else stateful_steps,
        phases=profile.phases
        if shrink
        else tuple(p for p in profile.phases if p is not Phase.shrink),
    )
