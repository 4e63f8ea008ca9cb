"""The ``package-setup`` group: SessionManager's package step, run against the provider.

A provider installs no package itself: SessionManager runs
:func:`mango.provider.packages.install_packages` (the package managers'
commands, in a fixed order, through ``exec``) after the setup allowlist and
before the final one and the binding. These checks run that very step, in
that order, on the target's offline :class:`~mango.provider.PackageSource`,
and check what the provider owes it:

* the commands run in order and each sees what the one before it did, so
  the source's plan installs (its steps depend on their order), and every
  package's program works afterwards, also from a restarted worker's
  attach (the binding says they are installed) and after a re-create of
  the key (a retry adopts the same sandbox);
* a failing install is reported, not hidden: the step raises the typed
  :class:`~mango.provider.packages.PackageSetupFailed` (permanent) naming
  the missing package, from the manager's exit status and stderr; the
  sandbox stays where ``find`` sees it and a re-create adopts it, so the
  kept intent's retry or the reconciler finds it.

What SessionManager itself does with that error (keep the intent, write no
binding) is its own contract, tested in mango-core with any provider; the
provider's part, checked here, is what makes it possible: an honest failure
and a sandbox left in place.

A sandbox that needs something for the setup alone implements
:class:`~mango.provider.PackageSetupSandbox` (the step begins and ends it);
with the spec's ``network="none"`` it must then have no network interface
but loopback once the step is over, also after a fresh provider's attach
(Docker lends such a sandbox the bridge for its package managers only).

With ``limited-network`` also declared, the sandbox is created limited and
the source's hosts are its setup allowlist, replaced by the (empty) final
list afterwards, as SessionManager does; a source reached over the network
without it gets ``network=bridge``.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import attrs
import pytest

from mango.provider import (
    Capability,
    LimitedNetworkSandbox,
    NetworkMode,
    PackagePlan,
    PackageSetupSandbox,
    PackageSource,
    Sandbox,
    SandboxSpec,
    is_permanent,
)
from mango.provider.packages import PackageSetupFailed, install_packages
from mango_conformance.checks import mark_checks
from mango_conformance.checks.capabilities import declared_capabilities, no_testbed
from mango_conformance.harness import Harness

__all__ = ["INSTALLED", "INTERFACES", "PackageChecks", "package_spec"]

INSTALLED = (
    'for p in "$@"; do '
    'if command -v "$p" >/dev/null 2>&1; then printf "%s=%s\\n" "$p" "$("$p" 2>/dev/null)"; '
    'else printf "%s=missing\\n" "$p"; fi; done'
)
"""For each package name: ``NAME=<what its program prints>``, or ``NAME=missing``."""

INTERFACES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
"""The sandbox's network interfaces, one name a line (``lo`` alone: no network)."""

_SETUP = Capability.PACKAGE_SETUP


def package_spec(harness: Harness, source: PackageSource, plan: PackagePlan) -> SandboxSpec:
    """The spec SessionManager would provision ``plan`` with, on this target's source."""
    spec = attrs.evolve(
        harness.options.spec, packages=plan, image=source.image or harness.options.spec.image
    )
    if Capability.LIMITED_NETWORK in declared_capabilities(harness):
        return attrs.evolve(spec, network=NetworkMode.LIMITED, network_allowed_hosts=())
    if source.hosts:
        return attrs.evolve(spec, network=NetworkMode.BRIDGE)
    return spec


def _source(harness: Harness) -> PackageSource:
    testbed = harness.testbed()
    source = testbed.packages if testbed is not None else None
    if source is None:
        pytest.fail(no_testbed(harness, _SETUP, "package source"))
    return source


def _set_up(harness: Harness, sandbox: Sandbox, spec: SandboxSpec, source: PackageSource) -> None:
    """SessionManager's setup step: [setup allowlist] -> packages -> [final allowlist]."""
    limited = spec.network is NetworkMode.LIMITED
    if limited:
        assert isinstance(sandbox, LimitedNetworkSandbox)
        setup = sorted({*spec.network_allowed_hosts, *source.hosts})
        harness.run(sandbox.apply_limited_network(setup), "the setup allowlist")
    harness.run(install_packages(sandbox, spec), "install_packages()")
    if limited:
        assert isinstance(sandbox, LimitedNetworkSandbox)
        harness.run(
            sandbox.apply_limited_network(list(spec.network_allowed_hosts)), "the final allowlist"
        )


def _expect_installed(harness: Harness, sandbox: Sandbox, source: PackageSource, when: str) -> None:
    names = source.packages()
    result = harness.sh(sandbox, INSTALLED, *names)
    got = dict(
        line.partition("=")[::2] for line in result.stdout.decode("utf-8", "replace").splitlines()
    )
    wrong = {name: got.get(name, "no answer") for name in names if got.get(name) != name}
    listed = ", ".join(f"{name}: {answer}" for name, answer in wrong.items())
    assert not wrong, f"{when}: packages not installed or not working ({listed})"


def _expect_no_network(harness: Harness, sandbox: Sandbox, spec: SandboxSpec, when: str) -> None:
    """A set-up sandbox whose spec says ``none`` keeps no network from its setup."""
    if spec.network is not NetworkMode.NONE or not isinstance(sandbox, PackageSetupSandbox):
        return
    result = harness.sh(sandbox, INTERFACES)
    interfaces = sorted(set(result.stdout.decode("utf-8", "replace").split()) - {"lo"})
    assert result.exit_code == 0, f"{when}: cannot list the network interfaces: {result}"
    assert not interfaces, (
        f"{when}: the sandbox's spec says network 'none' but it has the interfaces "
        f"{interfaces}: end_package_setup() must take the setup's network away"
    )


class PackageChecks:
    """The ``package-setup`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_SETUP.value, testbed=True)
    def test_package_setup_installs_in_order(self, conformance: Harness) -> None:
        """SessionManager's package step installs the plan; it lasts across attach and re-create."""
        source = _source(conformance)
        spec = package_spec(conformance, source, source.plan)
        key = conformance.new_key("pkg")
        sandbox = conformance.create(key, spec=spec)
        try:
            _set_up(conformance, sandbox, spec, source)
        except PackageSetupFailed as exc:
            pytest.fail(
                f"installing the source's plan failed ({exc}); the commands must run in "
                "order, each after the one before it ended, in one sandbox"
            )
        _expect_installed(conformance, sandbox, source, "after the package step")
        _expect_no_network(conformance, sandbox, spec, "after the package step")
        provider = conformance.open_provider()
        attached = conformance.attach(key, sandbox.ref, provider, spec=spec)
        _expect_installed(conformance, attached, source, "after a fresh provider's attach")
        _expect_no_network(conformance, attached, spec, "after a fresh provider's attach")
        again = conformance.create(key, conformance.open_provider(), spec=spec)
        assert again.ref == sandbox.ref, (
            f"a re-create after setup returned {again.ref}, not {sandbox.ref}"
        )
        _expect_installed(conformance, again, source, "after a re-create of the same key")

    @pytest.mark.mango_capability(_SETUP.value, testbed=True)
    def test_package_setup_failure_is_reported_and_keeps_the_sandbox(
        self, conformance: Harness
    ) -> None:
        """A missing package fails the step with PackageSetupFailed; the sandbox stays findable."""
        source = _source(conformance)
        spec = package_spec(conformance, source, source.failing)
        key = conformance.new_key("pkg-fail")
        sandbox = conformance.create(key, spec=spec)
        try:
            _set_up(conformance, sandbox, spec, source)
        except PackageSetupFailed as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - any other outcome is the finding
            pytest.fail(
                f"a missing package raised {type(exc).__name__}: {exc}, not PackageSetupFailed "
                "(the manager's non-zero exit must come back as a result, with its stderr)"
            )
        else:
            pytest.fail(
                f"installing a plan with the missing package {source.missing!r} raised nothing: "
                "the failure was reported as success, so SessionManager would bind a sandbox "
                "without its packages"
            )
        assert is_permanent(error)
        assert source.missing in str(error), (
            f"the error does not name the missing package {source.missing!r} "
            f"(the manager's stderr was lost): {error}"
        )
        found = conformance.run(conformance.open_provider().find(key), f"find({key!r})")
        assert found == sandbox.ref, (
            f"after a failed setup find() answered {found}, not {sandbox.ref}: the kept intent's "
            "retry and the reconciler reach the sandbox through it"
        )
        again = conformance.create(key, conformance.open_provider(), spec=spec)
        assert again.ref == sandbox.ref, (
            f"a retry's create after a failed setup returned {again.ref}, not {sandbox.ref}"
        )


mark_checks(PackageChecks, pytest.mark.mango_capability_group)
