"""Ownership labels and deterministic names, the same for every provider.

Every resource a provider makes for a Session carries three labels (E2B, Cube
and OpenSandbox call them metadata, Docker and Daytona labels; the local
provider writes them to an owner record beside the workspace)::

    io.mango.managed      "true"
    io.mango.namespace    the deployment's namespace
    io.mango.session_key  first 16 bytes of sha256(session key), 32 lowercase hex

and, where the backend has names, one deterministic name::

    mango-<hex(sha256(provider + "\\0" + namespace + "\\0" + session key)[:16])>

The name is the provider-side idempotency key (two creates for one key race
on it); the labels are the proof of ownership that attach, find, destroy and
list check. Because both carry the namespace, two deployments sharing a
Docker daemon, a base directory or a vendor account never see, attach to or
delete each other's resources, even for the same Session id. Neither reveals
the raw Session id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from mango.domain.errors import InvalidInput, OwnershipError
from mango.domain.hashing import session_key_hash
from mango.domain.registry import validate_namespace
from mango.domain.values import SandboxRef, validate_provider_name, validate_session_id

__all__ = [
    "DEFAULT_NAMESPACE",
    "LABEL_MANAGED",
    "LABEL_NAMESPACE",
    "LABEL_SESSION",
    "MANAGED",
    "NAME_PREFIX",
    "Ownership",
    "derived_namespace",
    "listed_time",
    "namespace_field",
    "validate_namespace",
]

LABEL_MANAGED = "io.mango.managed"
LABEL_NAMESPACE = "io.mango.namespace"
LABEL_SESSION = "io.mango.session_key"
MANAGED = "true"
NAME_PREFIX = "mango-"
"""Every deterministic name starts with it (38 characters in all)."""
OWNERSHIP_LABELS = frozenset({LABEL_MANAGED, LABEL_NAMESPACE, LABEL_SESSION})
DEFAULT_NAMESPACE = "default"
"""The namespace of a provider constructed directly (tests, scripts) without one.

Composition roots always pass the deployment's namespace from the store.
"""


def derived_namespace(prefix: str, seed: str) -> str:
    """A valid namespace ``<prefix>-<12 hex>`` that is the same for the same ``seed``.

    For conformance targets: a fresh scratch directory gives a fresh
    namespace, and re-entering it (a simulated restart) gives the same one.
    """
    return validate_namespace(f"{prefix}-{hashlib.sha256(seed.encode('utf-8')).hexdigest()[:12]}")


def listed_time(value: object) -> datetime | None:
    """A creation time as a backend lists it (RFC 3339 text or Unix seconds), in UTC.

    For :attr:`~mango.domain.values.OwnedResource.created_at`: anything
    unreadable is None (an age mango cannot tell, so ``mango gc`` keeps it),
    and a time without a zone is taken as UTC.
    """
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            moment = datetime.fromtimestamp(value, UTC)
        elif isinstance(value, str) and value.strip():
            moment = datetime.fromisoformat(value.strip().replace("z", "Z"))
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


def namespace_field() -> Any:
    """An attrs field ``namespace`` for a provider class: keyword-only, validated.

    Defaults to :data:`DEFAULT_NAMESPACE` for providers built directly in tests;
    factories always pass ``ProviderContext.namespace``.
    """
    return attrs.field(default=DEFAULT_NAMESPACE, kw_only=True, validator=_namespace)


def _provider(_instance: object, _attribute: object, value: Any) -> None:
    validate_provider_name(value)


def _namespace(_instance: object, _attribute: object, value: Any) -> None:
    validate_namespace(value)


@attrs.frozen
class Ownership:
    """One provider's ownership rules within one deployment namespace.

    Build it once from the provider name and ``ProviderContext.namespace``;
    every label, name, selector and check of the provider then goes through it.
    """

    provider: str = attrs.field(validator=_provider)
    namespace: str = attrs.field(validator=_namespace)

    @staticmethod
    def session_hash(session_key: str) -> str:
        """The fixed-length session label: sha256 of the key, first 16 bytes, 32 hex."""
        return session_key_hash(validate_session_id(session_key), 32)

    def labels(self, session_key: str) -> dict[str, str]:
        """The labels that mark a resource as ``session_key``'s in this namespace."""
        return {**self.selector(), LABEL_SESSION: self.session_hash(session_key)}

    def selector(self) -> dict[str, str]:
        """Labels that select everything this namespace owns (a list filter)."""
        return {LABEL_MANAGED: MANAGED, LABEL_NAMESPACE: self.namespace}

    def name(self, session_key: str) -> str:
        """The deterministic resource name of ``session_key`` in this namespace."""
        key = validate_session_id(session_key)
        text = f"{self.provider}\0{self.namespace}\0{key}"
        return NAME_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    def owned_hash(self, labels: Mapping[str, object] | None) -> str | None:
        """The session hash of a resource this namespace owns, or None if it is not ours.

        For listings: a resource without the managed label, of another
        namespace, or with a malformed session label is skipped, never raised on.
        """
        if not isinstance(labels, Mapping):
            return None
        if labels.get(LABEL_MANAGED) != MANAGED or labels.get(LABEL_NAMESPACE) != self.namespace:
            return None
        value = labels.get(LABEL_SESSION)
        if not isinstance(value, str) or len(value) != 32 or value.strip("0123456789abcdef"):
            return None
        return value

    def check(self, labels: Mapping[str, object] | None, session_key: str, *, what: str) -> None:
        """Raise :class:`OwnershipError` unless ``labels`` say ``session_key`` owns ``what``.

        ``what`` names the resource in the message (``"docker container mango-…"``).
        The checks run in order: unmanaged, another deployment, another session.
        """
        self.check_hash(labels, self.session_hash(session_key), what=what)

    def check_hash(
        self, labels: Mapping[str, object] | None, session_hash: str, *, what: str
    ) -> None:
        """Raise :class:`OwnershipError` unless ``labels`` are ours for ``session_hash``.

        For removing a listed resource whose Session key is unknown (``mango
        gc``): the same checks as :meth:`check`, by the hashed label.
        """
        if not isinstance(labels, Mapping) or labels.get(LABEL_MANAGED) != MANAGED:
            raise OwnershipError(f"refusing to use {what}: it is unmanaged (not made by mango)")
        if labels.get(LABEL_NAMESPACE) != self.namespace:
            raise OwnershipError(
                f"refusing to use {what}: it belongs to another deployment "
                f"(namespace {self.namespace!r} does not own it)"
            )
        if self.owned_hash(labels) != session_hash:
            raise OwnershipError(f"refusing to use {what}: it belongs to another session")

    def check_ref(self, ref: object) -> SandboxRef:
        """Return ``ref`` if it is a :class:`SandboxRef` of this provider.

        :class:`InvalidInput` if it is not a reference at all,
        :class:`OwnershipError` if it names another provider.
        """
        if not isinstance(ref, SandboxRef):
            raise InvalidInput(f"expected a SandboxRef, got {type(ref).__name__}")
        if ref.provider != self.provider:
            raise OwnershipError(
                f"sandbox reference {ref} belongs to provider {ref.provider!r}, "
                f"not {self.provider!r}"
            )
        return ref

    @staticmethod
    def reserved(labels: Mapping[str, str]) -> frozenset[str]:
        """Which of ``labels`` are ownership labels (extra labels may not set them)."""
        return OWNERSHIP_LABELS.intersection(labels)
