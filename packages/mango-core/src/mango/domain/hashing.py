"""Stable hashes of specs and session keys.

``spec_hash`` identifies a provisioning request; ``binding_spec_hash`` adds a
package-plan suffix so a binding is *evidence* that package setup finished
for that plan. ``session_key_hash`` is the fixed-length, non-reversible label
providers use to name and own resources without persisting raw Session ids.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from mango.domain.values import PackagePlan, SandboxSpec

__all__ = [
    "PACKAGES_MARKER",
    "binding_proves_package_setup",
    "binding_spec_hash",
    "package_plan_hash",
    "session_key_hash",
    "spec_from_json",
    "spec_hash",
    "spec_to_json",
]

PACKAGES_MARKER = "|packages="


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def spec_to_json(spec: SandboxSpec) -> dict[str, Any]:
    """Return the JSON-able form of ``spec`` (stable keys, lists for tuples)."""
    data = attrs.asdict(spec)
    data["network"] = spec.network.value
    return data


def spec_from_json(data: dict[str, Any]) -> SandboxSpec:
    """Rebuild a spec from :func:`spec_to_json` output (validation included)."""
    fields = dict(data)
    packages = fields.pop("packages", None) or {}
    return SandboxSpec(**fields, packages=PackagePlan(**packages))


def spec_hash(spec: SandboxSpec) -> str:
    """Hash of the whole spec, stored with provisioning intents."""
    return _digest(_canonical(spec_to_json(spec)))


def package_plan_hash(plan: PackagePlan) -> str:
    """Hash of a package plan alone."""
    return _digest(_canonical(attrs.asdict(plan)))


def binding_spec_hash(spec: SandboxSpec) -> str:
    """Hash stored with a binding: the spec hash plus the package-plan suffix."""
    return spec_hash(spec) + PACKAGES_MARKER + package_plan_hash(spec.packages)


def binding_proves_package_setup(binding_hash: str, spec: SandboxSpec) -> bool:
    """True if a binding with ``binding_hash`` proves ``spec``'s packages are installed.

    An empty plan needs no proof. A changed plan on a live sandbox is not
    proven: packages are never re-installed on a bound sandbox.
    """
    if spec.packages.is_empty:
        return True
    _, marker, suffix = binding_hash.rpartition(PACKAGES_MARKER)
    if marker:
        return suffix == package_plan_hash(spec.packages)
    return binding_hash == spec_hash(spec)


def session_key_hash(session_key: str, length: int = 32) -> str:
    """Fixed-length hex label derived from a Session key (sha256, truncated)."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()[:length]
