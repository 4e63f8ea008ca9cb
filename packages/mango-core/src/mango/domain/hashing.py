"""Stable, versioned hashes of specs and session keys.

``spec_hash`` identifies a provisioning request; ``binding_spec_hash`` adds a
package-plan suffix so a binding is *evidence* that package setup finished
for that plan. ``session_key_hash`` is the fixed-length, non-reversible label
providers use to name and own resources without persisting raw Session ids.

Spec hashes are stored in intents and bindings, so they must outlive changes
to :class:`~mango.domain.values.SandboxSpec`. The current version
(``sha256v2:``) hashes a *canonical* form of the spec:

* a field equal to its default is left out, recursively (the package plan
  too), so adding an optional field with a default keeps every existing hash;
* enums become their values, an integral float becomes the integer
  (``timeout=30`` and ``timeout=30.0`` are the same request), sets are sorted;
* tuples keep their order: package lists are passed to the package manager
  verbatim, and allowlists are already sorted by their converters.

This canonical form is also the spec's one JSON document: the edge converter
(:mod:`mango.app.converter`, a layer above, since the domain imports no
cattrs) writes a spec as :func:`canonical_form` into intent rows and Temporal
payloads, so what is stored and what is hashed are the same value.

Hashes written by version 1 (``sha256:``, the whole ``attrs.asdict``) are
still recognised (whichever way an integral ``timeout`` or ``cpus`` was
spelled, ``30`` or ``30.0``) by :func:`spec_hash_matches` and
:func:`binding_proves_package_setup`. Compare stored hashes only through
those two functions, never with ``==``.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
from collections.abc import Mapping
from typing import Any

import attrs

from mango.domain.values import PackagePlan, SandboxSpec

__all__ = [
    "PACKAGES_MARKER",
    "SPEC_HASH_PREFIX",
    "SPEC_HASH_V1_PREFIX",
    "binding_proves_package_setup",
    "binding_spec_hash",
    "canonical_form",
    "package_plan_hash",
    "package_plan_hash_matches",
    "session_key_hash",
    "spec_hash",
    "spec_hash_matches",
]

PACKAGES_MARKER = "|packages="
SPEC_HASH_PREFIX = "sha256v2:"
"""Prefix of the hashes written today (canonical form, defaults omitted)."""
SPEC_HASH_V1_PREFIX = "sha256:"
"""Prefix of version-1 hashes (``attrs.asdict`` of every field); still recognised."""

# The fields version 1 hashed. Frozen here so that a field added later cannot
# change what a v1 hash is recomputed from: a spec that sets a newer field to
# a non-default value was never hashed under v1 and never matches a v1 hash.
_V1_SPEC_FIELDS = (
    "timeout",
    "image",
    "memory",
    "cpus",
    "network",
    "pids_limit",
    "network_allowed_hosts",
    "setup_network_allowed_hosts",
    "packages",
)
_V1_PLAN_FIELDS = ("apt", "cargo", "gem", "go", "npm", "pip")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_form(value: Any) -> Any:
    """The JSON value version 2 hashes for ``value`` (see the module docstring).

    attrs instances become objects without the fields equal to their default;
    mappings keep every key (their values canonicalised).
    """
    if attrs.has(type(value)):
        return _canonical_attrs(value)
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, Mapping):
        return {str(key): canonical_form(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((canonical_form(item) for item in value), key=_canonical)
    if isinstance(value, tuple | list):
        return [canonical_form(item) for item in value]
    raise TypeError(f"cannot hash a {type(value).__name__} in a spec")


def _canonical_attrs(value: Any) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for field in attrs.fields(type(value)):
        form = canonical_form(getattr(value, field.name))
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            # takes_self factories cannot run without an instance; keep the field.
            default = attrs.NOTHING if default.takes_self else default.factory()
        if default is attrs.NOTHING or form != canonical_form(default):
            result[field.name] = form
    return result


def spec_hash(spec: SandboxSpec) -> str:
    """Versioned hash of the whole spec, stored with provisioning intents."""
    return SPEC_HASH_PREFIX + _sha256(_canonical(canonical_form(spec)))


def package_plan_hash(plan: PackagePlan) -> str:
    """Versioned hash of a package plan alone."""
    return SPEC_HASH_PREFIX + _sha256(_canonical(canonical_form(plan)))


def _v1_fields(value: Any, names: tuple[str, ...]) -> dict[str, Any] | None:
    """``attrs.asdict(value)`` limited to the v1 ``names``; None if a newer field is set."""
    newer = set(canonical_form(value)) - set(names)
    if newer:
        return None
    data = attrs.asdict(value)
    return {name: data[name] for name in names}


def _number_spellings(value: Any) -> tuple[Any, ...]:
    """An integral number as both JSON spellings (``30`` and ``30.0``); anything else as is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (value,)
    if isinstance(value, float):
        return (value, int(value)) if value.is_integer() else (value,)
    return (value, float(value))


def _spec_hashes_v1(spec: SandboxSpec) -> set[str]:
    """Every v1 hash ``spec`` may have been stored under.

    v1 hashed the JSON text of each number as it was given, so ``timeout=30``
    and ``timeout=30.0`` hashed apart, and a spec read back may spell an
    integral number the other way (a Temporal payload or a stored document
    carries it as ``30``, the converter reads a float field as ``30.0``).
    They are one request, as v2 says, so each spelling of the float fields is
    recognised.
    """
    data = _v1_fields(spec, _V1_SPEC_FIELDS)
    plan = _v1_fields(spec.packages, _V1_PLAN_FIELDS)
    if data is None or plan is None:
        return set()
    data["network"] = spec.network.value
    data["packages"] = plan
    hashes = set()
    for timeout, cpus in itertools.product(
        _number_spellings(data["timeout"]), _number_spellings(data["cpus"])
    ):
        spelled = {**data, "timeout": timeout, "cpus": cpus}
        hashes.add(SPEC_HASH_V1_PREFIX + _sha256(_canonical(spelled)))
    return hashes


def _package_plan_hash_v1(plan: PackagePlan) -> str | None:
    data = _v1_fields(plan, _V1_PLAN_FIELDS)
    return None if data is None else SPEC_HASH_V1_PREFIX + _sha256(_canonical(data))


def spec_hash_matches(stored: str, spec: SandboxSpec) -> bool:
    """True if ``stored`` (an intent's spec hash, any version) identifies ``spec``.

    An unknown version never matches: the caller treats it as another spec.
    """
    if stored.startswith(SPEC_HASH_PREFIX):
        return stored == spec_hash(spec)
    if stored.startswith(SPEC_HASH_V1_PREFIX):
        return stored in _spec_hashes_v1(spec)
    return False


def package_plan_hash_matches(stored: str, plan: PackagePlan) -> bool:
    """True if ``stored`` (a package-plan hash, any version) identifies ``plan``."""
    if stored.startswith(SPEC_HASH_PREFIX):
        return stored == package_plan_hash(plan)
    if stored.startswith(SPEC_HASH_V1_PREFIX):
        return stored == _package_plan_hash_v1(plan)
    return False


def binding_spec_hash(spec: SandboxSpec) -> str:
    """Hash stored with a binding: the spec hash plus the package-plan suffix."""
    return spec_hash(spec) + PACKAGES_MARKER + package_plan_hash(spec.packages)


def binding_proves_package_setup(binding_hash: str, spec: SandboxSpec) -> bool:
    """True if a binding with ``binding_hash`` proves ``spec``'s packages are installed.

    An empty plan needs no proof. A changed plan on a live sandbox is not
    proven: packages are never re-installed on a bound sandbox. Hashes of
    every version are understood, and the oldest bindings (no package suffix)
    prove the plan only if their spec hash matches the whole spec.
    """
    if spec.packages.is_empty:
        return True
    _, marker, suffix = binding_hash.rpartition(PACKAGES_MARKER)
    if marker:
        return package_plan_hash_matches(suffix, spec.packages)
    return spec_hash_matches(binding_hash, spec)


def session_key_hash(session_key: str, length: int = 32) -> str:
    """Fixed-length hex label derived from a Session key (sha256, truncated)."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()[:length]
