"""Ports for operating the fleet as a whole: the orphan sweep (``mango gc``).

An *orphan* is a resource a provider holds under this deployment's namespace
(:meth:`~mango.domain.ports.Provider.list_owned` sees it) that no Session
record claims: a database restored from an older backup, a crash inside a
provider's create before mango learned the id, a hand-made run. The sweep
(:mod:`mango.app.sweep`) finds them through :class:`SessionClaims` and
removes them through :class:`SweepableProvider`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from mango.domain.values import OwnedResource, SandboxRef

__all__ = ["SessionClaims", "SweepableProvider"]


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
