"""The conformance-target testbed values: what a target may hand the capability checks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.provider import (
    Capability,
    ConformanceTarget,
    ConformanceTestbed,
    EgressProbe,
    InvalidInput,
    NetworkTestbed,
    PackagePlan,
    PackageSource,
    Provider,
)
from mango.provider.packages import PackageSetupFailed, install_packages, package_commands

A = EgressProbe("a.probe.test", "http://a.probe.test:8080/", "token-a")
B = EgressProbe("B.Probe.test", "http://b.probe.test:8080/", "token-b")


@contextlib.asynccontextmanager
async def _never(_scratch: Path) -> AsyncIterator[Provider]:
    raise AssertionError("not opened in these tests")
    yield  # pragma: no cover


def test_probes_are_validated() -> None:
    """Hosts are lowered; two distinct hosts and tokens are needed; wildcards and URLs refused."""
    assert B.host == "b.probe.test"
    assert NetworkTestbed((A, B)).probes == (A, B)
    with pytest.raises(InvalidInput, match="at least two"):
        NetworkTestbed((A,))
    with pytest.raises(InvalidInput, match="distinct hosts"):
        NetworkTestbed((A, EgressProbe("a.probe.test", "http://a.probe.test/", "other")))
    with pytest.raises(InvalidInput, match="distinct tokens"):
        NetworkTestbed((A, EgressProbe("c.probe.test", "http://c.probe.test/", "token-a")))
    with pytest.raises(InvalidInput, match="wildcard"):
        EgressProbe("*.probe.test", "http://x.probe.test/", "t")
    with pytest.raises(InvalidInput, match="http://"):
        EgressProbe("a.probe.test", "https://a.probe.test/", "t")
    with pytest.raises(InvalidInput, match="one printable word"):
        EgressProbe("a.probe.test", "http://a.probe.test/", "two words")


def test_package_source_is_consistent() -> None:
    """The failing plan holds the missing package, the installable one does not."""
    source = PackageSource(
        plan=PackagePlan(apt=("one", "two"), pip=("three",)),
        failing=PackagePlan(apt=("one", "nope")),
        missing="nope",
        hosts=("Pkgs.Mirror.test",),
    )
    assert source.packages() == ("one", "two", "three")
    assert source.hosts == ("pkgs.mirror.test",)
    with pytest.raises(InvalidInput, match="must contain 'gone'"):
        PackageSource(plan=source.plan, failing=source.failing, missing="gone")
    with pytest.raises(InvalidInput, match=r"installable plan .* contains 'one'"):
        PackageSource(plan=source.plan, failing=source.failing, missing="one")
    with pytest.raises(InvalidInput, match="non-empty PackagePlan"):
        PackageSource(plan=PackagePlan(), failing=source.failing, missing="nope")


def test_targets_carry_an_optional_testbed_and_waivers() -> None:
    """Old targets are unchanged; waivers need a reason and a real capability."""
    plain = ConformanceTarget(provider="acme", open=_never)
    assert (plain.testbed, plain.waivers) == (None, ())
    assert plain.waiver(Capability.PACKAGE_SETUP) is None
    waived = ConformanceTarget(
        provider="acme", open=_never, waivers={"package-setup": " no package manager here "}
    )
    assert waived.waiver(Capability.PACKAGE_SETUP) == "no package manager here"
    assert waived.waiver(Capability.LIMITED_NETWORK) is None
    with pytest.raises(InvalidInput, match="needs a reason"):
        ConformanceTarget(provider="acme", open=_never, waivers={"package-setup": " "})
    with pytest.raises(InvalidInput, match="not a capability"):
        ConformanceTarget(provider="acme", open=_never, waivers={"teleport": "why"})
    assert ConformanceTestbed() == ConformanceTestbed(network=None, packages=None)


def test_the_surface_exposes_sessionmanagers_package_step() -> None:
    """The provider surface re-exports the very step SessionManager runs."""
    import mango.app.packages

    assert install_packages is mango.app.packages.install_packages
    assert package_commands is mango.app.packages.package_commands
    assert PackageSetupFailed is mango.app.packages.PackageSetupFailed
