"""Capability groups: checks that run only for providers that declare the capability.

A group is selected by the provider's *declared* capabilities (its
registration, or what it reports when no registration is given), never by its
name. A provider that does not declare a capability skips the group with
"not declared". A provider that declares it must hand out sandboxes that
implement the matching protocols of :mod:`mango.domain.ports` (checked here):
file resources, session outputs and skill bundles need the resource lock as
well. Memory stores have no protocol yet: a provider that declares them fails
its protocol check, since nothing in mango could use the capability.

Behavioural checks: ``limited-network`` (:mod:`.network`) and
``package-setup`` (:mod:`.packages`) need what only the target can give
offline (hosts to reach, a package source): its testbed
(``ConformanceTarget.testbed``). A declared capability whose target has no
testbed for it fails those checks (the declaration cannot be checked)
unless the target waives it with a reason (``ConformanceTarget.waivers``),
which the run reports as a waiver. ``file-resources`` (:mod:`.resources`),
``session-outputs`` (:mod:`.outputs`), ``skill-bundles`` (:mod:`.skills`),
``file-api`` (:mod:`.fileapi`) and ``background-processes`` (:mod:`.processes`)
need no testbed. The other
groups' behavioural checks are listed in :data:`PENDING_CHECKS` and skip
until the issue that builds the capability specifies them.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import pytest

from mango.provider import (
    Capability,
    CapabilitySet,
    FileResourceSandbox,
    FileSystemSandbox,
    LimitedNetworkSandbox,
    PausableSandbox,
    PortSandbox,
    ProcessSandbox,
    ResourceLockSandbox,
    SessionOutputSandbox,
    SkillBundleSandbox,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness

__all__ = [
    "CAPABILITY_PROTOCOLS",
    "NOT_DECLARED",
    "PENDING",
    "PENDING_CHECKS",
    "CapabilityChecks",
    "declared_capabilities",
    "no_testbed",
    "pending_reason",
]

NOT_DECLARED = "not declared"
"""How a skipped group of an undeclared capability starts its reason (the verdict counts them)."""
PENDING = "pending"
"""How a declared capability's not-yet-specified check starts its skip reason."""

CAPABILITY_PROTOCOLS: dict[Capability, tuple[type, ...]] = {
    Capability.LIMITED_NETWORK: (LimitedNetworkSandbox,),
    Capability.PACKAGE_SETUP: (),
    Capability.FILE_RESOURCES: (FileResourceSandbox, ResourceLockSandbox),
    Capability.SESSION_OUTPUTS: (SessionOutputSandbox, ResourceLockSandbox),
    Capability.SKILL_BUNDLES: (SkillBundleSandbox, ResourceLockSandbox),
    Capability.FILE_API: (FileSystemSandbox,),
    Capability.BACKGROUND_PROCESSES: (ProcessSandbox,),
    Capability.PAUSE: (PausableSandbox,),
    Capability.EXPOSED_PORTS: (PortSandbox,),
}
"""The sandbox protocols each built capability requires (package setup runs through exec).

A capability missing here has no protocol yet; declaring it fails the group's protocol check.
"""

PENDING_CHECKS: dict[Capability, str] = {
    Capability.MEMORY_STORES: (
        "memory stores: replace then read round-trips, a fresh-client attach sees the "
        "same files, and a concurrent change is a PreconditionFailed"
    ),
}
"""What each group will check once its capability is specified."""


def pending_reason(capability: Capability) -> str:
    """The skip reason of a declared capability whose checks are not written yet."""
    return (
        f"{PENDING}: {capability.value} checks arrive with the issue that builds "
        f"{capability.description} "
        f"({PENDING_CHECKS[capability]})"
    )


def no_testbed(harness: Harness, capability: Capability, part: str) -> str:
    """Why a declared capability's behavioural check fails when the target gives it nothing."""
    return (
        f"{harness.name} declares {capability.value}, but its conformance target supplies no "
        f"{part} (ConformanceTarget.testbed) and does not waive {capability.value} "
        "(ConformanceTarget.waivers): the declaration cannot be checked"
    )


def declared_capabilities(harness: Harness) -> CapabilitySet:
    """The registration's declaration if the options give one, else what the provider reports."""
    declared = harness.options.declared_capabilities
    return declared if declared is not None else harness.provider.capabilities


def _protocol_check(harness: Harness, capability: Capability) -> None:
    assert capability in CAPABILITY_PROTOCOLS, (
        f"the provider declares {capability.value}, but mango defines no sandbox protocol "
        f"for {capability.description} yet: nothing could use it; declare it once the issue "
        "that builds it has"
    )
    protocols = CAPABILITY_PROTOCOLS[capability]
    if not protocols:
        return
    key = harness.new_key("cap")
    sandbox = harness.create(key)
    attached = harness.attach(key, sandbox.ref, harness.open_provider())
    for protocol in protocols:
        assert isinstance(sandbox, protocol), (
            f"the provider declares {capability.value} but its sandbox does not implement "
            f"{protocol.__name__}"
        )
        assert isinstance(attached, protocol), (
            f"a sandbox attached through a fresh provider does not implement {protocol.__name__}"
        )


class CapabilityChecks:
    """One group per capability; skipped as "not declared" unless the provider declares it."""

    def test_declared_capabilities_match_reported(self, conformance: Harness) -> None:
        """Every fresh provider reports the declared capabilities (registration drift check)."""
        declared = declared_capabilities(conformance)
        for provider in (conformance.provider, conformance.open_provider()):
            assert provider.capabilities == declared, (
                f"declared [{', '.join(declared.names()) or 'none'}] but the provider reports "
                f"[{', '.join(provider.capabilities.names()) or 'none'}]"
            )

    @pytest.mark.mango_capability(Capability.FILE_RESOURCES.value)
    def test_file_resources_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring file resources implement its two protocols."""
        _protocol_check(conformance, Capability.FILE_RESOURCES)

    @pytest.mark.mango_capability(Capability.SESSION_OUTPUTS.value)
    def test_session_outputs_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring session outputs implement its two protocols."""
        _protocol_check(conformance, Capability.SESSION_OUTPUTS)

    @pytest.mark.mango_capability(Capability.SKILL_BUNDLES.value)
    def test_skill_bundles_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring skill bundles implement its two protocols."""
        _protocol_check(conformance, Capability.SKILL_BUNDLES)

    @pytest.mark.mango_capability(Capability.MEMORY_STORES.value)
    def test_memory_stores_protocol(self, conformance: Harness) -> None:
        """A provider declaring memory stores fails: they have no sandbox protocol yet."""
        _protocol_check(conformance, Capability.MEMORY_STORES)

    @pytest.mark.mango_capability(Capability.MEMORY_STORES.value)
    def test_memory_stores_round_trip(self) -> None:
        """Memory store checks (see PENDING_CHECKS)."""
        pytest.skip(pending_reason(Capability.MEMORY_STORES))

    @pytest.mark.mango_capability(Capability.LIMITED_NETWORK.value)
    def test_limited_network_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring limited network implement LimitedNetworkSandbox."""
        _protocol_check(conformance, Capability.LIMITED_NETWORK)

    @pytest.mark.mango_capability(Capability.FILE_API.value)
    def test_file_api_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring the file API implement FileSystemSandbox."""
        _protocol_check(conformance, Capability.FILE_API)

    @pytest.mark.mango_capability(Capability.BACKGROUND_PROCESSES.value)
    def test_background_processes_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring background processes implement ProcessSandbox."""
        _protocol_check(conformance, Capability.BACKGROUND_PROCESSES)

    @pytest.mark.mango_capability(Capability.PAUSE.value)
    def test_pause_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring pause implement PausableSandbox."""
        _protocol_check(conformance, Capability.PAUSE)

    @pytest.mark.mango_capability(Capability.EXPOSED_PORTS.value)
    def test_exposed_ports_protocol(self, conformance: Harness) -> None:
        """Sandboxes of a provider declaring exposed ports implement PortSandbox."""
        _protocol_check(conformance, Capability.EXPOSED_PORTS)


mark_checks(CapabilityChecks, pytest.mark.mango_capability_group)
