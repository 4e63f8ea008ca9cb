"""The ``limited-network`` group: an egress allowlist, checked from inside the sandbox.

Each check creates a sandbox with ``network=limited`` and looks at what its
commands can reach: the target's testbed supplies at least two
:class:`~mango.provider.EgressProbe` hosts, served and reachable from a
sandbox that allows them, answering distinct tokens. A probe is one command
(``wget``, else ``curl``, else ``python3``) per host; it prints ``reached``
only when the host answered its token. Every check sees a host reached as
well as blocked, so a probe that cannot work never passes as "blocked".

What SessionManager relies on, clause by clause (``apply_limited_network``
is the port's only operation):

* an empty allowlist blocks all egress, from the moment a limited sandbox
  exists and again after the list is emptied;
* an allowlisted host is reachable, and only it (a ``*.`` wildcard allows
  the names under it); the policy lives with the sandbox, so a restarted
  worker's attach sees it;
* replacing the list is idempotent and replaces, never merges;
* drift is repaired on attach: SessionManager applies the final list to
  every attached client, and the provider must compare with the policy the
  backend enforces, not with what it last asked for. The drift comes from
  the testbed's backdoor when it has one, else from another provider
  instance.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
import pytest

from mango.provider import (
    Capability,
    EgressProbe,
    LimitedNetworkSandbox,
    NetworkMode,
    NetworkTestbed,
    Sandbox,
    SandboxSpec,
)
from mango_conformance.checks import mark_checks
from mango_conformance.checks.capabilities import no_testbed
from mango_conformance.harness import Harness

__all__ = ["EGRESS_PROBE", "PROBE_SECONDS", "NetworkChecks", "limited_spec"]

PROBE_SECONDS = 10
"""How long one probe waits for a host (a blocked name usually fails at once)."""

EGRESS_PROBE = """\
fetch() {
  if command -v wget >/dev/null 2>&1; then wget -q -T "$1" -O - "$2"
  elif command -v curl >/dev/null 2>&1; then curl -fsS -m "$1" "$2"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys, urllib.request as u
sys.stdout.write(u.urlopen(sys.argv[2], timeout=float(sys.argv[1])).read().decode())' "$1" "$2"
  else return 127
  fi
}
seconds=$1; shift
while [ "$#" -ge 2 ]; do
  got=$(fetch "$seconds" "$1" 2>/dev/null); status=$?
  if [ "$status" -eq 127 ] && [ -z "$got" ]; then echo no-http-client
  elif [ "$got" = "$2" ]; then echo reached
  else echo blocked
  fi
  shift 2
done
"""
"""For each ``URL TOKEN`` pair after ``$1`` (seconds per fetch): ``reached``, ``blocked``, or
``no-http-client`` when the sandbox has none of ``wget``, ``curl``, ``python3``."""

_LIMITED = Capability.LIMITED_NETWORK


def limited_spec(harness: Harness, allowed: Iterable[str] = ()) -> SandboxSpec:
    """The options' spec with ``network=limited`` and the final allowlist ``allowed``."""
    return attrs.evolve(
        harness.options.spec, network=NetworkMode.LIMITED, network_allowed_hosts=tuple(allowed)
    )


def _wildcard_matches(pattern: str, host: str) -> bool:
    return host.endswith(pattern[1:]) and host != pattern[2:]


@attrs.define
class _Egress:
    """The testbed's probes, and what a sandbox can reach of them."""

    harness: Harness
    probes: tuple[EgressProbe, ...]

    @classmethod
    def of(cls, harness: Harness) -> tuple[_Egress, NetworkTestbed]:
        testbed = harness.testbed()
        network = testbed.network if testbed is not None else None
        if network is None:
            pytest.fail(no_testbed(harness, _LIMITED, "network testbed (hosts to reach)"))
        return cls(harness, network.probes), network

    @property
    def a(self) -> EgressProbe:
        return self.probes[0]

    @property
    def b(self) -> EgressProbe:
        return self.probes[1]

    def reached(self, sandbox: Sandbox) -> set[str]:
        """The probe hosts a command in ``sandbox`` reaches now."""
        args = [str(PROBE_SECONDS)]
        for probe in self.probes:
            args += [probe.url, probe.token]
        timeout = PROBE_SECONDS * 2 * len(self.probes) + 10
        result = self.harness.sh(sandbox, EGRESS_PROBE, *args, timeout=timeout)
        lines = result.stdout.decode("utf-8", "replace").split()
        if "no-http-client" in lines:
            pytest.fail("the sandbox has none of wget, curl or python3 to probe egress with")
        printed = (
            f"the egress probe printed {result.stdout[:200]!r} (exit {result.exit_code}, "
            f"stderr {result.stderr[:200]!r})"
        )
        assert len(lines) == len(self.probes), printed
        assert set(lines) <= {"reached", "blocked"}, printed
        pairs = zip(self.probes, lines, strict=True)
        return {probe.host for probe, line in pairs if line == "reached"}

    def expect(self, sandbox: Sandbox, reachable: Iterable[str], when: str) -> None:
        """Assert that exactly the hosts ``reachable`` can be reached from ``sandbox``."""
        wanted = set(reachable)
        got = self.reached(sandbox)
        leaked = sorted(got - wanted)
        lost = sorted(wanted - got)
        problems = [
            *([f"{', '.join(leaked)} reachable though not allowed"] if leaked else []),
            *([f"{', '.join(lost)} not reachable though allowed"] if lost else []),
        ]
        assert not problems, f"{when}: {'; '.join(problems)}"

    def apply(self, sandbox: Sandbox, hosts: Sequence[str]) -> None:
        """``sandbox.apply_limited_network(hosts)`` on the harness loop."""
        assert isinstance(sandbox, LimitedNetworkSandbox), (
            f"the sandbox does not implement LimitedNetworkSandbox ({type(sandbox).__name__})"
        )
        self.harness.run(
            sandbox.apply_limited_network(list(hosts)), f"apply_limited_network({list(hosts)})"
        )


def _applied(hosts: Sequence[str]) -> str:
    return f"after apply_limited_network({list(hosts)})"


class NetworkChecks:
    """The ``limited-network`` checks; they run where the capability is declared."""

    @pytest.mark.mango_capability(_LIMITED.value, testbed=True)
    def test_limited_network_empty_allowlist_blocks_egress(self, conformance: Harness) -> None:
        """A limited sandbox with an empty allowlist reaches no host, from creation and after."""
        egress, _ = _Egress.of(conformance)
        sandbox = conformance.create(spec=limited_spec(conformance))
        egress.expect(sandbox, (), "created with network=limited and an empty allowlist")
        egress.apply(sandbox, [egress.a.host])
        # The probe works and the host is served: the block was the policy's.
        egress.expect(sandbox, [egress.a.host], _applied([egress.a.host]))
        egress.apply(sandbox, [])
        egress.expect(sandbox, (), _applied([]))

    @pytest.mark.mango_capability(_LIMITED.value, testbed=True)
    def test_limited_network_allowlisted_host_is_reachable(self, conformance: Harness) -> None:
        """Only allowlisted hosts (and a wildcard's names) are reachable, after attach too."""
        egress, _ = _Egress.of(conformance)
        a, b = egress.a.host, egress.b.host
        key = conformance.new_key("net-allow")
        spec = limited_spec(conformance, [a])
        sandbox = conformance.create(key, spec=spec)
        egress.apply(sandbox, [a])
        egress.expect(sandbox, [a], _applied([a]))
        egress.apply(sandbox, [a, b])
        egress.expect(sandbox, [a, b], _applied([a, b]))
        attached = conformance.attach(key, sandbox.ref, conformance.open_provider(), spec=spec)
        egress.expect(attached, [a, b], "attached by a fresh provider (the policy is kept)")
        parent = a.partition(".")[2]
        if "." in parent:
            wildcard = f"*.{parent}"
            egress.apply(attached, [wildcard])
            matched = [p.host for p in egress.probes if _wildcard_matches(wildcard, p.host)]
            egress.expect(attached, matched, _applied([wildcard]))

    @pytest.mark.mango_capability(_LIMITED.value, testbed=True)
    def test_limited_network_replacing_the_list_is_idempotent(self, conformance: Harness) -> None:
        """The same list twice changes nothing; a new list replaces the old one, never merges."""
        egress, _ = _Egress.of(conformance)
        a, b = egress.a.host, egress.b.host
        sandbox = conformance.create(spec=limited_spec(conformance))
        for hosts in ([a], [a], [b], [b], [a, b], [b, a], [a]):
            egress.apply(sandbox, hosts)
            egress.expect(sandbox, hosts, _applied(hosts))

    @pytest.mark.mango_capability(_LIMITED.value, testbed=True)
    def test_limited_network_drift_is_repaired_on_attach(self, conformance: Harness) -> None:
        """A policy changed behind the provider is put right by the final list after attach."""
        egress, network = _Egress.of(conformance)
        a, b = egress.a.host, egress.b.host
        key = conformance.new_key("net-drift")
        spec = limited_spec(conformance, [a])
        sandbox = conformance.create(key, spec=spec)
        egress.apply(sandbox, [a])
        egress.expect(sandbox, [a], _applied([a]))
        if network.drift is not None:
            conformance.run(network.drift(sandbox.ref, (b,)), "the testbed's drift()")
            how = "the testbed's drift() allowed only " + b
        else:
            other = conformance.attach(key, sandbox.ref, conformance.open_provider(), spec=spec)
            egress.apply(other, [b])
            how = "another provider instance applied only " + b
        egress.expect(sandbox, [b], f"{how} (the drift must take effect)")
        restarted = conformance.attach(key, sandbox.ref, conformance.open_provider(), spec=spec)
        # What SessionManager does on every attach: the final list, again.
        egress.apply(restarted, [a])
        egress.expect(restarted, [a], f"after {how}, attach and the final list {[a]} again")


mark_checks(NetworkChecks, pytest.mark.mango_capability_group)
