"""The run configuration the plugin derives from the command line, kept on the pytest config."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from mango_conformance.ledger import LeakLedger
from mango_conformance.options import SuiteOptions
from mango_conformance.profiles import DEFAULT_PROFILE, PROFILES, Profile
from mango_conformance.waivers import Waiver

__all__ = ["RUN_CONFIG_KEY", "RunConfig", "effective_profile", "run_config"]


@attrs.define
class RunConfig:
    """Options of one pytest session, plus what the suite records while it runs."""

    profile: Profile = attrs.field(factory=lambda: PROFILES[DEFAULT_PROFILE])
    strict: bool = False
    waivers: tuple[Waiver, ...] = ()
    database_dir: Path | None = None
    max_examples: int | None = None
    stateful_steps: int | None = None
    shrink: bool = True
    """False drops Hypothesis's shrink phase."""
    ledger: LeakLedger = attrs.field(factory=LeakLedger)
    suite_items: int = 0
    """How many collected tests belong to the suite (0: the plugin stays silent)."""
    waived: dict[str, str] = attrs.field(factory=dict)
    """Waived node ids and their reasons."""
    providers: set[str] = attrs.field(factory=set)
    """Provider names the suite ran against."""
    outcomes: dict[str, str] = attrs.field(factory=dict)
    """Node id -> ``passed``, ``failed`` or ``skipped`` of every check that ran."""
    skip_kinds: dict[str, str] = attrs.field(factory=dict)
    """Node id of a skipped check -> ``waived``, ``not declared``, ``pending`` or ``other``."""
    failures: dict[str, str] = attrs.field(factory=dict)
    """Node id -> the first line of why the check failed."""
    deselected: int = 0
    """Checks of the suite that were collected but deselected (``-k``, ``-m``)."""


RUN_CONFIG_KEY = pytest.StashKey[RunConfig]()


def run_config(config: pytest.Config) -> RunConfig:
    """The session's :class:`RunConfig`; defaults if the plugin is not active."""
    found = config.stash.get(RUN_CONFIG_KEY, None)
    if found is None:
        found = RunConfig()
        config.stash[RUN_CONFIG_KEY] = found
    return found


def effective_profile(run: RunConfig, options: SuiteOptions) -> Profile:
    """The session profile, except that a live target never runs an offline profile."""
    if options.live and not run.profile.live:
        return PROFILES["live-smoke"]
    return run.profile
