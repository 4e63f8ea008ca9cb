"""The orphan sweep behind ``mango gc``: find, and on request remove, unclaimed resources.

One pass, in this order:

1. list what the provider holds under this namespace (``list_owned``); a
   provider that cannot answer fails the pass before anything is judged;
2. ask the store which of those a Session record claims
   (:class:`~mango.domain.fleet.SessionClaims`). Listing comes first on
   purpose: an intent is written before a provider creates anything and is
   replaced by the binding in one transaction, so a resource in the listing
   that no record claims afterwards belongs to no Session, however quickly a
   provisioning runs beside the sweep;
3. judge each unclaimed resource by its age: younger than ``older_than``
   (a backend whose listing lags, a create that has not been recorded by a
   mango older than this one) or of unknown age is kept;
4. with ``destroy``, remove each orphan through the provider's own
   ownership-checked teardown (:class:`~mango.domain.fleet.SweepableProvider`),
   after asking the store once more whether something claimed it meanwhile.

Nothing is removed on doubt: a resource whose ownership the provider cannot
confirm is kept (:class:`OwnershipError`), and the first
:class:`ProviderUnavailable` stops the pass, leaving the rest for the next.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from datetime import UTC, datetime

import attrs

from mango.app import telemetry
from mango.domain.errors import InvalidInput, MangoError, OwnershipError, ProviderUnavailable
from mango.domain.fleet import SessionClaims, SweepableProvider
from mango.domain.ports import Clock, Provider
from mango.domain.values import OwnedResource, SandboxRef

__all__ = ["DEFAULT_OLDER_THAN", "SweepItem", "SweepReport", "Verdict", "sweep_orphans"]

log = logging.getLogger("mango.app.sweep")

DEFAULT_OLDER_THAN = 3600.0
"""An hour: far longer than any create takes, so a create in flight is never swept."""


class Verdict(enum.StrEnum):
    """What the sweep made of one unclaimed resource."""

    ORPHAN = "orphan"
    """No record claims it and it is old enough: swept with ``destroy``."""
    TOO_YOUNG = "too-young"
    """No record claims it, but it is younger than ``older_than``: kept."""
    UNKNOWN_AGE = "unknown-age"
    """No record claims it, but the backend does not say when it was made: kept."""
    CLAIMED = "claimed"
    """A record claimed it by the time it was to be removed: kept."""


class Outcome(enum.StrEnum):
    """What happened to an orphan when the sweep was asked to remove it."""

    DESTROYED = "destroyed"
    KEPT = "kept"
    """The provider could not confirm it is ours (or a record claimed it): left alone."""
    FAILED = "failed"
    NOT_ATTEMPTED = "not-attempted"
    """The pass stopped (the provider became unavailable) before reaching it."""


@attrs.frozen
class SweepItem:
    """One unclaimed resource, its age and what the sweep did with it."""

    ref: SandboxRef
    session_hash: str
    age: float | None
    """Seconds since the backend made it; None if it does not say."""
    verdict: Verdict
    outcome: Outcome | None = None
    """Set when the pass was asked to destroy orphans."""
    detail: str = ""


@attrs.frozen
class SweepReport:
    """One sweep pass of one provider."""

    provider: str
    older_than: float
    destroy: bool
    listed: int
    claimed: int
    items: tuple[SweepItem, ...] = ()
    """Every unclaimed resource, oldest first."""
    stopped: str | None = None
    """Why the pass stopped before the end (the provider became unavailable)."""

    @property
    def orphans(self) -> tuple[SweepItem, ...]:
        """The items judged orphans (old enough, unclaimed)."""
        return tuple(item for item in self.items if item.verdict is Verdict.ORPHAN)

    @property
    def destroyed(self) -> int:
        """How many orphans were removed."""
        return sum(1 for item in self.items if item.outcome is Outcome.DESTROYED)

    @property
    def ok(self) -> bool:
        """True when the pass ran to the end and nothing it tried failed."""
        failed = any(item.outcome is Outcome.FAILED for item in self.items)
        return self.stopped is None and not failed


class _SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _age(resource: OwnedResource, now: datetime) -> float | None:
    if resource.created_at is None:
        return None
    return max(0.0, (now - resource.created_at).total_seconds())


@attrs.frozen
class _Pass:
    provider: Provider
    claims: SessionClaims

    async def claimed_now(self, item: SweepItem) -> bool:
        resource = OwnedResource(item.ref, item.session_hash)
        return item.ref in await self.claims.claimed(self.provider.name, [resource])

    async def remove(self, item: SweepItem) -> SweepItem:
        """Remove one orphan; raises :class:`ProviderUnavailable` to stop the pass."""
        if await self.claimed_now(item):
            return attrs.evolve(
                item, verdict=Verdict.CLAIMED, outcome=Outcome.KEPT, detail="claimed since listed"
            )
        if not isinstance(self.provider, SweepableProvider):
            return attrs.evolve(
                item,
                outcome=Outcome.FAILED,
                detail=f"provider {self.provider.name!r} cannot remove a resource without its "
                "Session key; remove it by hand",
            )
        try:
            await self.provider.destroy_owned(OwnedResource(item.ref, item.session_hash))
        except OwnershipError as exc:
            return attrs.evolve(item, outcome=Outcome.KEPT, detail=str(exc))
        except ProviderUnavailable:
            raise
        except MangoError as exc:
            return attrs.evolve(item, outcome=Outcome.FAILED, detail=f"{type(exc).__name__}: {exc}")
        log.info("swept orphan %s (session hash %s)", item.ref, item.session_hash)
        return attrs.evolve(item, outcome=Outcome.DESTROYED)


async def sweep_orphans(
    provider: Provider,
    claims: SessionClaims,
    *,
    older_than: float = DEFAULT_OLDER_THAN,
    destroy: bool = False,
    clock: Clock | None = None,
) -> SweepReport:
    """One pass over ``provider``'s resources in this namespace (see the module docstring).

    Raises :class:`ProviderUnavailable` if the listing (or the store) fails:
    nothing has been removed then.
    """
    if (
        isinstance(older_than, bool)
        or not isinstance(older_than, int | float)
        or not (0 <= older_than < float("inf"))
    ):
        raise InvalidInput(
            f"older_than must be a non-negative number of seconds, got {older_than!r}"
        )
    listed = list(await provider.list_owned())
    claimed = await claims.claimed(provider.name, listed)
    now = (clock or _SystemClock()).now()
    unclaimed = sorted(
        (r for r in listed if r.ref not in claimed),
        key=lambda r: (r.created_at is None, r.created_at or now, r.ref.external_id),
    )
    items: list[SweepItem] = []
    for resource in unclaimed:
        age = _age(resource, now)
        if age is None:
            verdict = Verdict.UNKNOWN_AGE
        elif age < older_than:
            verdict = Verdict.TOO_YOUNG
        else:
            verdict = Verdict.ORPHAN
        items.append(SweepItem(resource.ref, resource.session_hash, age, verdict))
    stopped: str | None = None
    if destroy:
        sweep = _Pass(provider, claims)
        for position, item in enumerate(items):
            if item.verdict is not Verdict.ORPHAN:
                continue
            if stopped is not None:
                items[position] = attrs.evolve(item, outcome=Outcome.NOT_ATTEMPTED)
                continue
            try:
                items[position] = await sweep.remove(item)
            except asyncio.CancelledError:
                raise
            except ProviderUnavailable as exc:
                stopped = f"{type(exc).__name__}: {exc}"
                log.warning("orphan sweep of %s stopped: %s", provider.name, stopped)
                items[position] = attrs.evolve(item, outcome=Outcome.FAILED, detail=stopped)
    telemetry.count_swept(provider.name, sum(1 for i in items if i.outcome is Outcome.DESTROYED))
    return SweepReport(
        provider=provider.name,
        older_than=older_than,
        destroy=destroy,
        listed=len(listed),
        claimed=len(listed) - len(unclaimed),
        items=tuple(items),
        stopped=stopped,
    )
