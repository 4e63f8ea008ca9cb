"""What an offline conformance target supplies so that capability checks can run.

Some capabilities cannot be checked with a sandbox alone: whether an egress
allowlist holds needs hosts to reach, package setup needs packages to
install. A :class:`~mango.domain.registry.ConformanceTarget` may therefore
open a :class:`ConformanceTestbed` beside its providers (same scratch
directory, same event loop): the hosts, the package source and the
backdoors its capability checks need, all offline (a fake's upstream
servers, a package mirror on 127.0.0.1, packages baked into an image).
Everything here is opt-in; a target without a testbed still runs every
other check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from mango.domain.errors import InvalidInput
from mango.domain.values import NetworkMode, PackagePlan, SandboxRef, validate_host

__all__ = ["ConformanceTestbed", "EgressProbe", "NetworkTestbed", "PackageSource", "PortTestbed"]

DriftHook = Callable[[SandboxRef, tuple[str, ...]], Awaitable[None]]
"""``drift(ref, hosts)``: make the sandbox's enforced allowlist ``hosts`` behind the provider."""


def _lower(value: str) -> str:
    return value.lower() if isinstance(value, str) else value


def _probe_host(_instance: object, _attribute: object, value: Any) -> None:
    validate_host(value)
    if value.startswith("*."):
        raise InvalidInput(f"an egress probe names one host, not the wildcard {value!r}")


def _http_url(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or not value.startswith("http://"):
        raise InvalidInput(f"an egress probe's url must be an http:// URL, got {value!r}")


def _token(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or not value or not value.isprintable() or " " in value:
        raise InvalidInput(f"an egress probe's token must be one printable word, got {value!r}")


@attrs.frozen
class EgressProbe:
    """A host the network checks try to reach from inside a sandbox.

    A command in the sandbox fetches ``url`` (plain HTTP, on ``host``) with
    the first of ``wget``, ``curl`` or ``python3`` it finds; a reachable
    host answers exactly ``token``. ``host`` is what goes into the allowlist.
    """

    host: str = attrs.field(validator=_probe_host, converter=_lower)
    url: str = attrs.field(validator=_http_url)
    token: str = attrs.field(validator=_token)


def _probes(values: Iterable[EgressProbe]) -> tuple[EgressProbe, ...]:
    probes = tuple(values)
    if len(probes) < 2 or not all(isinstance(probe, EgressProbe) for probe in probes):
        raise InvalidInput("a network testbed needs at least two EgressProbe hosts")
    if len({probe.host for probe in probes}) != len(probes):
        raise InvalidInput("the egress probes of a network testbed must have distinct hosts")
    if len({probe.token for probe in probes}) != len(probes):
        raise InvalidInput("the egress probes of a network testbed must answer distinct tokens")
    return probes


@attrs.frozen
class NetworkTestbed:
    """Hosts for the ``limited-network`` checks, and an optional backdoor.

    ``probes``: at least two hosts, each served and reachable from a sandbox
    whose allowlist names it, with distinct tokens, so "blocked" is told from
    "the probe cannot work". ``drift``, if given, changes the allowlist the
    backend enforces for ``ref`` to exactly ``hosts`` without going through
    the provider (an operator, a restarted sidecar): the drift check then
    needs no cooperation from the provider to cause drift. Without it, the
    check makes the drift through another provider instance.
    """

    probes: tuple[EgressProbe, ...] = attrs.field(converter=_probes)
    drift: DriftHook | None = attrs.field(default=None, repr=False)


def _names(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise InvalidInput("expected a list of host names, got a single string")
    return tuple(validate_host(value).lower() for value in values)


def _plan(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, PackagePlan) or value.is_empty:
        raise InvalidInput(f"a package source's {attribute.name} must be a non-empty PackagePlan")


def _missing(instance: PackageSource, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidInput("a package source's missing package must be a non-empty name")
    failing = attrs.asdict(instance.failing)
    if not any(value in names for names in failing.values()):
        raise InvalidInput(f"the failing plan of a package source must contain {value!r}")
    if any(value in names for names in attrs.asdict(instance.plan).values()):
        raise InvalidInput(f"the installable plan of a package source contains {value!r}")


@attrs.frozen
class PackageSource:
    """An offline package source for the ``package-setup`` checks.

    * ``plan`` installs from it with SessionManager's commands
      (:func:`mango.provider.packages.package_commands`). Every package
      ``P`` of the plan, once installed, provides a program ``P`` on the
      sandbox's ``PATH`` that prints ``P`` and exits 0. Its commands must
      depend on their order (a later one fails unless the earlier ones ran
      first, as ``apt-get install`` does without ``apt-get update``), so a
      backend that runs them out of order fails.
    * ``failing`` is a plan whose install fails because of ``missing``, a
      package the source does not have; the package manager's error names it.
    * ``hosts``: what the package managers reach over the network (empty for
      a source inside the image); a sandbox with limited network gets them
      in its setup allowlist, as ``MANGO_PACKAGE_MANAGER_HOSTS`` would.
    * ``image``: the image that has the package managers and the source
      configured (``None``: the spec's).
    """

    plan: PackagePlan = attrs.field(validator=_plan)
    failing: PackagePlan = attrs.field(validator=_plan)
    missing: str = attrs.field(validator=_missing)
    hosts: tuple[str, ...] = attrs.field(default=(), converter=_names)
    image: str | None = None

    def packages(self) -> tuple[str, ...]:
        """Every package of :attr:`plan`, in SessionManager's manager order."""
        return tuple(name for names in attrs.astuple(self.plan) for name in names)


def _port(_instance: object, _attribute: object, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InvalidInput(f"a port testbed's port is a number from 1 to 65535, got {value!r}")


@attrs.frozen
class PortTestbed:
    """How the ``exposed-ports`` checks reach a server in a sandbox.

    A sandbox made with ``network`` (the options' spec otherwise) runs an
    HTTP server on ``port`` (busybox ``httpd``, else ``python3 -m
    http.server``), and ``expose_port(port)`` must return a URL through
    which this process fetches what it serves. Docker needs the port
    published when the container is made (its target's provider publishes
    ``port`` on a ``bridge`` network).
    """

    port: int = attrs.field(validator=_port)
    network: NetworkMode = attrs.field(default=NetworkMode.NONE, converter=NetworkMode)


@attrs.frozen
class ConformanceTestbed:
    """What a target opens for its capability checks; every part is optional."""

    network: NetworkTestbed | None = None
    packages: PackageSource | None = None
    ports: PortTestbed | None = None
