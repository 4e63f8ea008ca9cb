"""What a provider author may tell the suite beyond the target itself."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs

from mango.provider import CapabilitySet, ProviderRegistration, Quirk, SandboxSpec

__all__ = ["LIVE_TRUE_VALUES", "SuiteOptions", "live_enabled", "live_env_var"]

LIVE_TRUE_VALUES = frozenset({"1", "true", "yes", "on"})
"""Values of ``MANGO_LIVE_<NAME>`` that enable a live run."""


def live_env_var(provider: str) -> str:
    """The variable that gates live runs of ``provider``: ``MANGO_LIVE_<NAME>``."""
    return "MANGO_LIVE_" + provider.upper().replace("-", "_")


def live_enabled(provider: str) -> bool:
    """True if ``MANGO_LIVE_<NAME>`` is set to a true value (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(live_env_var(provider), "").strip().lower() in LIVE_TRUE_VALUES


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number or None, got {value!r}")


def _quirks(values: Iterable[Quirk | str]) -> frozenset[Quirk]:
    return frozenset(Quirk(value) for value in values)


@attrs.frozen(kw_only=True)
class SuiteOptions:
    """Provider-specific knobs of the suite; every field has a portable default.

    Return one from the ``conformance_options`` fixture to change them.
    """

    spec: SandboxSpec = attrs.field(factory=lambda: SandboxSpec(timeout=30.0))
    """The spec every check creates and attaches with."""
    shell: str = "sh"
    """The POSIX shell inside the sandbox (``argv[0]`` of every scripted check)."""
    output_cap: int | None = attrs.field(default=None, validator=_positive)
    """The provider's per-stream output cap, if known; then a flood must keep exactly that many."""
    flood_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive)
    """How much the bounded-output check prints per stream (raised to 4x ``output_cap``)."""
    prompt_seconds: float = attrs.field(default=10.0, validator=_positive)
    """How soon a timed-out or cancelled command must give control back."""
    operation_timeout: float = attrs.field(default=120.0, validator=_positive)
    """Upper bound on any single provider call; a slower call fails the check."""
    declared_capabilities: CapabilitySet | None = None
    """The capabilities the provider's registration declares; compared with what it reports.

    ``None`` means "what the provider reports"; capability groups run from this.
    """
    declared_quirks: frozenset[Quirk] = attrs.field(default=frozenset(), converter=_quirks)
    """The contract quirks the provider's registration declares.

    Checks of a clause a quirk relaxes check the relaxed form (for example only
    the leader must die on timeout under ``timeout-kills-leader-only``).
    Deviations are declared here, from the registration, never as a per-run
    waiver, so admission, SessionManager and the suite all see the same list.
    """
    live: bool = False
    """The target talks to a billable service: skipped unless ``MANGO_LIVE_<NAME>=1``,
    and offline profiles are replaced by ``live-smoke``."""
    max_examples: int | None = attrs.field(default=None, validator=_positive)
    """Overrides the profile's ``max_examples`` for this provider (the CLI flag wins)."""
    stateful_steps: int | None = attrs.field(default=None, validator=_positive)
    """Overrides the profile's ``stateful_step_count`` for this provider (the CLI flag wins)."""

    @classmethod
    def for_registration(cls, registration: ProviderRegistration, **options: Any) -> SuiteOptions:
        """Options carrying ``registration``'s capabilities and quirks (plus ``options``)."""
        return cls(
            declared_capabilities=registration.capabilities,
            declared_quirks=registration.quirks,
            **options,
        )

    def has_quirk(self, quirk: Quirk) -> bool:
        """True if the registration declares ``quirk``."""
        return quirk in self.declared_quirks

    @property
    def flood_size(self) -> int:
        """Bytes printed per stream by the bounded-output check."""
        if self.output_cap is None:
            return self.flood_bytes
        return max(self.flood_bytes, 4 * self.output_cap)
