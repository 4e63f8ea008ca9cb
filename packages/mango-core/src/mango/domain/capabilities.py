"""The capability model and admission.

A provider declares a frozen :class:`CapabilitySet` when it registers.
Admission reads it without constructing the provider or loading credentials,
and returns *every* reason a spec is not admissible, not only the first.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import attrs

from mango.domain.errors import AdmissionRejected, CapabilityNotSupported
from mango.domain.values import NetworkMode, SandboxSpec

__all__ = [
    "RESOURCE_CAPABILITIES",
    "Capability",
    "CapabilitySet",
    "admission_reasons",
    "admit",
]


class Capability(enum.StrEnum):
    """Optional features beyond the core sandbox contract."""

    PACKAGE_SETUP = "package-setup"
    LIMITED_NETWORK = "limited-network"
    FILE_RESOURCES = "file-resources"
    SESSION_OUTPUTS = "session-outputs"
    SKILL_BUNDLES = "skill-bundles"
    MEMORY_STORES = "memory-stores"
    FILE_API = "file-api"
    BACKGROUND_PROCESSES = "background-processes"
    PAUSE = "pause"
    EXPOSED_PORTS = "exposed-ports"

    @property
    def description(self) -> str:
        """A short human phrase for messages."""
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Capability.PACKAGE_SETUP: "package installation",
    Capability.LIMITED_NETWORK: "limited network (egress allowlist)",
    Capability.FILE_RESOURCES: "file resource mounts",
    Capability.SESSION_OUTPUTS: "session output mounts",
    Capability.SKILL_BUNDLES: "skill bundle mounts",
    Capability.MEMORY_STORES: "memory store mounts",
    Capability.FILE_API: "the file API (list, stat, remove, rename, make a directory)",
    Capability.BACKGROUND_PROCESSES: "background processes",
    Capability.PAUSE: "pause and resume",
    Capability.EXPOSED_PORTS: "exposed ports",
}

RESOURCE_CAPABILITIES = frozenset(
    {
        Capability.FILE_RESOURCES,
        Capability.SESSION_OUTPUTS,
        Capability.SKILL_BUNDLES,
        Capability.MEMORY_STORES,
    }
)
"""Capabilities that stand for resources mounted into a sandbox."""


def _to_frozenset(values: Iterable[Capability | str]) -> frozenset[Capability]:
    return frozenset(Capability(value) for value in values)


@attrs.frozen
class CapabilitySet:
    """An immutable set of capabilities a provider declares or reports."""

    items: frozenset[Capability] = attrs.field(factory=frozenset, converter=_to_frozenset)

    @classmethod
    def of(cls, *capabilities: Capability | str) -> CapabilitySet:
        """Build a set from capabilities given as arguments."""
        return cls(capabilities)

    def __contains__(self, capability: object) -> bool:
        return capability in self.items

    def __iter__(self) -> Iterator[Capability]:
        return iter(sorted(self.items))

    def __len__(self) -> int:
        return len(self.items)

    def names(self) -> tuple[str, ...]:
        """Sorted capability names, for listings."""
        return tuple(capability.value for capability in self)


def admission_reasons(
    provider: str,
    capabilities: CapabilitySet,
    spec: SandboxSpec,
    resources: Iterable[Capability] = (),
) -> tuple[tuple[str, bool], ...]:
    """Return every reason ``spec`` is not admissible, each with a flag: is it a capability?

    ``resources`` names the resource capabilities the Session will need
    (file resources, outputs, skills, memory). An empty result admits.
    """
    reasons: list[tuple[str, bool]] = []
    if not spec.packages.is_empty and Capability.PACKAGE_SETUP not in capabilities:
        reasons.append((f"{provider} does not support package installation", True))
    if spec.network is NetworkMode.LIMITED and Capability.LIMITED_NETWORK not in capabilities:
        reasons.append((f"{provider} does not support limited networking", True))
    if spec.network is not NetworkMode.LIMITED and (
        spec.network_allowed_hosts or spec.setup_network_allowed_hosts
    ):
        reasons.append(
            (f"network allowlists need network 'limited', not {spec.network.value!r}", False)
        )
    if spec.memory_stores and Capability.MEMORY_STORES not in capabilities:
        resources = {*resources, Capability.MEMORY_STORES}
    for resource in sorted(set(resources)):
        if resource not in RESOURCE_CAPABILITIES:
            reasons.append((f"{resource.value} is not a resource capability", False))
        elif resource not in capabilities:
            reasons.append((f"{provider} does not support {resource.description}", True))
    return tuple(reasons)


def admit(
    provider: str,
    capabilities: CapabilitySet,
    spec: SandboxSpec,
    resources: Iterable[Capability] = (),
) -> None:
    """Raise if ``spec`` is not admissible; the error lists every reason.

    Raises :class:`CapabilityNotSupported` when any reason is a missing
    capability, else :class:`AdmissionRejected`.
    """
    found = admission_reasons(provider, capabilities, spec, resources)
    if not found:
        return
    texts = [text for text, _ in found]
    if any(is_capability for _, is_capability in found):
        raise CapabilityNotSupported(provider, texts)
    raise AdmissionRejected(provider, texts)
