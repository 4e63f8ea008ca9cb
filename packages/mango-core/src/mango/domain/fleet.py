"""Operating the fleet as a whole: its ports and the fleet policy.

An *orphan* is a resource a provider holds under this deployment's namespace
(:meth:`~mango.domain.ports.Provider.list_owned` sees it) that no Session
record claims: a database restored from an older backup, a crash inside a
provider's create before mango learned the id, a hand-made run. The sweep
(:mod:`mango.app.sweep`) finds them through :class:`SessionClaims` and
removes them through :class:`SweepableProvider`.

:class:`FleetPolicy` is the deployment's configuration of the fleet (read by
:func:`fleet_policy` from ``MANGO_MAX_SANDBOXES``, ``MANGO_GC_INTERVAL``,
``MANGO_GC_OLDER_THAN``, ``MANGO_EVICT_IDLE_AFTER`` and ``MANGO_EVICT_ACTION``): the limit every
SessionManager enforces, and what the worker runs on Temporal schedules.
:class:`FleetRecords` is the part of the
:class:`~mango.domain.ports.BindingStore` port those rules read and write.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from mango.domain.durations import duration_setting
from mango.domain.errors import ConfigurationError
from mango.domain.validators import MAX_SETTING_SECONDS, number_setting, positive_int
from mango.domain.values import Binding, OwnedResource, ProvisioningIntent, SandboxRef

__all__ = [
    "DEFAULT_GC_OLDER_THAN",
    "MAX_SANDBOXES_LIMIT",
    "MIN_IDLE_SECONDS",
    "EvictAction",
    "FleetPolicy",
    "FleetRecords",
    "SessionClaims",
    "SweepableProvider",
    "fleet_policy",
]

DEFAULT_GC_OLDER_THAN = 3600.0
"""The age an unclaimed resource must reach before the periodic sweep removes it (an hour)."""
MIN_IDLE_SECONDS = 60.0
"""The shortest idle time an eviction accepts: uses are written every 30 s at most."""
MAX_SANDBOXES_LIMIT = 1_000_000
"""The largest ``MANGO_MAX_SANDBOXES``."""
_MIN_INTERVAL = 60.0


class EvictAction(enum.StrEnum):
    """What the idle eviction does to a Session's sandbox (``MANGO_EVICT_ACTION``)."""

    PAUSE = "pause"
    """Pause it where the provider declares ``pause`` (the workspace stays); destroy elsewhere."""
    DESTROY = "destroy"
    """Destroy it, whatever the provider can do."""


def _evict_action(env: Mapping[str, str]) -> EvictAction:
    raw = env.get("MANGO_EVICT_ACTION", "").strip().lower()
    if not raw:
        return EvictAction.PAUSE
    try:
        return EvictAction(raw)
    except ValueError:
        choices = ", ".join(action.value for action in EvictAction)
        raise ConfigurationError(
            f"MANGO_EVICT_ACTION must be one of {choices}, got {raw!r}",
            hint="pause keeps the workspace where the provider can pause; destroy frees it",
        ) from None


@attrs.frozen
class FleetPolicy:
    """How the deployment operates its fleet (every part off unless configured)."""

    max_sandboxes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_int)
    )
    """``MANGO_MAX_SANDBOXES``: live sandboxes the whole deployment may hold."""
    gc_interval: float | None = None
    """``MANGO_GC_INTERVAL``: the worker sweeps orphans this often (None: never)."""
    gc_older_than: float = DEFAULT_GC_OLDER_THAN
    """``MANGO_GC_OLDER_THAN``: the age an orphan must reach to be swept periodically."""
    evict_idle_after: float | None = None
    """``MANGO_EVICT_IDLE_AFTER``: Sessions unused this long lose their sandbox (None: never)."""
    evict_action: EvictAction = attrs.field(default=EvictAction.PAUSE, converter=EvictAction)
    """``MANGO_EVICT_ACTION``: pause (where the provider can) or destroy an idle sandbox."""

    @property
    def evict_interval(self) -> float | None:
        """How often the worker looks for idle Sessions: a quarter of the idle time, 15 s to 5 min.

        So a Session is evicted between ``evict_idle_after`` and a quarter more.
        """
        if self.evict_idle_after is None:
            return None
        return min(300.0, max(15.0, self.evict_idle_after / 4))


def fleet_policy(env: Mapping[str, str]) -> FleetPolicy:
    """Read the fleet settings from ``env``; :class:`ConfigurationError` names a bad one."""
    limit = number_setting(
        env, "MANGO_MAX_SANDBOXES", minimum=1, maximum=MAX_SANDBOXES_LIMIT, integer=True
    )
    older = duration_setting(
        env, "MANGO_GC_OLDER_THAN", minimum=_MIN_INTERVAL, maximum=MAX_SETTING_SECONDS
    )
    return FleetPolicy(
        max_sandboxes=None if limit is None else int(limit),
        gc_interval=duration_setting(
            env, "MANGO_GC_INTERVAL", minimum=_MIN_INTERVAL, maximum=MAX_SETTING_SECONDS
        ),
        gc_older_than=DEFAULT_GC_OLDER_THAN if older is None else older,
        evict_idle_after=duration_setting(
            env, "MANGO_EVICT_IDLE_AFTER", minimum=MIN_IDLE_SECONDS, maximum=MAX_SETTING_SECONDS
        ),
        evict_action=_evict_action(env),
    )


class FleetRecords(Protocol):
    """The store's records of the fleet as a whole: part of the BindingStore port."""

    async def reserve_slot(self, intent: ProvisioningIntent, limit: int | None) -> bool:
        """Let ``intent`` take one of ``limit`` places (None: no limit), before anything exists.

        Live sandboxes are the bindings neither lost nor evicted (an
        eviction counts until its destroy finished) plus the intents holding
        a place; the count and the reservation are one
        atomic decision across every process sharing the store. An intent
        that already holds its place keeps it. A full fleet removes the
        intent (compare-and-delete) and raises
        :class:`~mango.domain.errors.FleetFull`. False if the stored intent
        is gone or differs (another worker changed it).
        """
        ...

    async def live_sandboxes(self) -> int:
        """How many places are taken (live sandboxes, as :meth:`reserve_slot` counts them)."""
        ...

    async def record_use(self, session_id: str, ref: SandboxRef) -> bool:
        """Note that the binding of ``ref`` is in use now.

        False if the Session is no longer bound to ``ref`` or its binding was
        marked evicted or paused: the caller must not use the resource (a
        paused one is resumed first).
        """
        ...

    async def list_idle(
        self, provider: str, idle_for: float, limit: int = 100
    ) -> Sequence[Binding]:
        """That provider's bindings to evict, longest unused first.

        Bindings of Sessions not fenced, neither lost, evicted nor paused,
        unused (since the last :meth:`record_use`, else since they were made)
        for ``idle_for`` seconds or more; evicted ones whose destroy is not
        finished; and paused ones whose pause the provider has not confirmed.
        """
        ...

    async def mark_evicted(
        self, session_id: str, ref: SandboxRef, idle_for: float
    ) -> Binding | None:
        """Mark the binding of ``ref`` evicted if it is still unused for ``idle_for`` seconds.

        Compare-and-set against :meth:`record_use`: an acquire that recorded
        its use first wins. Returns the marked binding, or None (used since,
        lost, already evicted, fenced, or no longer bound to ``ref``).
        """
        ...

    async def finish_eviction(self, session_id: str, ref: SandboxRef) -> None:
        """Record that the evicted resource ``ref`` was destroyed; idempotent."""
        ...


@runtime_checkable
class SweepableProvider(Protocol):
    """A provider that can remove a listed resource without knowing its Session key.

    :meth:`~mango.domain.ports.Provider.destroy` checks ownership against a
    Session key, which an orphan no longer has (only its hashed label).
    """

    async def destroy_owned(self, resource: OwnedResource) -> None:
        """Remove ``resource`` (as :meth:`list_owned` reported it) and what it keeps beside it.

        The provider reads its own records again (labels, metadata, owner
        record; never anything inside the sandbox) and removes the resource
        only if they still carry the managed label, this namespace and
        ``resource.session_hash``: :class:`~mango.domain.errors.OwnershipError`
        otherwise. A resource already gone is success.
        :class:`~mango.domain.errors.ProviderUnavailable` if the backend
        cannot answer (nothing is removed on doubt).
        """
        ...


class SessionClaims(Protocol):
    """Which listed resources a Session record claims (the BindingStore's rows)."""

    async def claimed(
        self, provider: str, resources: Sequence[OwnedResource]
    ) -> frozenset[SandboxRef]:
        """The refs among ``resources`` that some record claims.

        A resource is claimed when a binding names its reference, or when a
        Session row (in any state: provisioning, bound, lost, being deleted,
        or unbound, which adopts the resource on its next acquire and removes
        it on delete) has the resource's session hash. Since an intent is
        written before a provider creates anything, a resource listed before
        this call is claimed by its intent or binding unless its Session is
        gone.
        """
        ...
