"""The one aggregate suite class a provider author subclasses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.provider import Capability, ConformanceTarget
from mango_conformance.checks.capabilities import (
    NOT_DECLARED,
    CapabilityChecks,
    declared_capabilities,
)
from mango_conformance.checks.fileapi import FileApiChecks
from mango_conformance.checks.gaps import GapChecks
from mango_conformance.checks.memory import MemoryStoreChecks
from mango_conformance.checks.network import NetworkChecks
from mango_conformance.checks.outputs import OutputChecks
from mango_conformance.checks.packages import PackageChecks
from mango_conformance.checks.parity import ParityChecks
from mango_conformance.checks.pause import PauseChecks, PortChecks
from mango_conformance.checks.processes import ProcessChecks
from mango_conformance.checks.reads import ReadChecks
from mango_conformance.checks.resources import FileResourceChecks
from mango_conformance.checks.same import SameBehaviourChecks
from mango_conformance.checks.skills import SkillBundleChecks
from mango_conformance.checks.stateful import StatefulChecks
from mango_conformance.checks.streaming import StreamChecks
from mango_conformance.checks.writes import WriteStreamChecks
from mango_conformance.config import run_config
from mango_conformance.harness import Harness
from mango_conformance.options import SuiteOptions, live_enabled, live_env_var
from mango_conformance.targets import as_target

__all__ = ["ProviderSuite"]


class ProviderSuite(
    ParityChecks,
    GapChecks,
    ReadChecks,
    WriteStreamChecks,
    SameBehaviourChecks,
    StreamChecks,
    CapabilityChecks,
    NetworkChecks,
    PackageChecks,
    FileResourceChecks,
    FileApiChecks,
    OutputChecks,
    MemoryStoreChecks,
    PauseChecks,
    PortChecks,
    ProcessChecks,
    SkillBundleChecks,
    StatefulChecks,
):
    """Every check of the mango provider contract, in one class.

    Subclass it in a test module (the name must start with ``Test``) and
    override ``conformance_target``::

        class TestAcmeProvider(mango_conformance.ProviderSuite):
            @pytest.fixture
            def conformance_target(self):
                return mango_conformance.provider_target("acme", lambda scratch: Acme(scratch))

    Override ``conformance_options`` to describe the provider (its output
    cap, whether a timeout destroys the sandbox, its registration's
    capabilities, whether it is live). Capability groups run or skip from the
    declared capabilities. Any single check can be overridden by redefining
    the test method.
    """

    pytestmark = pytest.mark.mango_conformance

    @pytest.fixture
    def conformance_target(self) -> ConformanceTarget:
        """The provider under test. Override it: return a ConformanceTarget.

        ``target.open(scratch_dir)`` must yield a fresh provider on every
        entry, and a provider from a later entry must attach to what an
        earlier one created (a restarted worker).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must override the conformance_target fixture "
            "(return a mango.domain.registry.ConformanceTarget, for example "
            "mango_conformance.provider_target(name, factory))"
        )

    @pytest.fixture
    def conformance_options(self) -> SuiteOptions:
        """Provider-specific knobs; the defaults suit a local-style provider."""
        return SuiteOptions()

    @pytest.fixture
    def conformance(
        self,
        conformance_target: object,
        conformance_options: SuiteOptions,
        tmp_path: Path,
        request: pytest.FixtureRequest,
    ) -> Iterator[Harness]:
        """A :class:`Harness` over the target; everything it created is destroyed afterwards."""
        target = as_target(conformance_target)
        if conformance_options.live and not live_enabled(target.provider):
            pytest.skip(f"live run of {target.provider}: set {live_env_var(target.provider)}=1")
        run = run_config(request.config)
        run.providers.add(target.provider)
        harness = Harness(
            target,
            conformance_options,
            tmp_path,
            ledger=run.ledger,
            where=request.node.nodeid,
        )
        try:
            yield harness
        finally:
            harness.close()

    @pytest.fixture(autouse=True)
    def _mango_capability_gate(self, request: pytest.FixtureRequest) -> None:
        """Skip a capability group unless the provider declares the capability.

        A behavioural check (``mango_capability(name, testbed=True)``) of a
        declared capability that the target waives is skipped as a waiver,
        with the target's reason, and counted as one in the verdict.
        """
        marker = request.node.get_closest_marker("mango_capability")
        if marker is None:
            return
        capability = Capability(marker.args[0])
        harness: Harness = request.getfixturevalue("conformance")
        if capability not in declared_capabilities(harness):
            pytest.skip(f"{NOT_DECLARED}: {harness.name} does not declare {capability.value}")
        reason = harness.target.waiver(capability) if marker.kwargs.get("testbed") else None
        if reason is not None:
            text = f"{capability.value} waived by the {harness.name} target: {reason}"
            run_config(request.config).waived[request.node.nodeid] = text
            pytest.skip(f"waived: {text}")
