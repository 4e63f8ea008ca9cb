"""Environments: a sandbox spec as a person writes it (a profile, command-line options).

An environment is loosely typed text and numbers: a profile in the
configuration file, ``--package pip:requests==2.32.3`` on the command line.
:func:`spec_from_fields` turns one into a :class:`~mango.domain.values.SandboxSpec`
and collects *every* problem on the way (an unknown key, a bad network mode,
each invalid host, an unknown package manager) instead of stopping at the
first, so admission (:mod:`mango.app.admission`) can report them together
with what the provider cannot do.

The keys are the spec's own field names: ``timeout``, ``image``, ``memory``,
``cpus``, ``network``, ``pids_limit``, ``network_allowed_hosts``,
``setup_network_allowed_hosts`` and ``packages`` (a mapping of manager to
package names: ``apt``, ``cargo``, ``gem``, ``go``, ``npm``, ``pip``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mango.domain.errors import InvalidInput
from mango.domain.values import NetworkMode, PackagePlan, SandboxSpec, validate_host

__all__ = [
    "ENVIRONMENT_KEYS",
    "PACKAGE_MANAGERS",
    "SpecFields",
    "merge_fields",
    "parse_package",
    "spec_from_fields",
]

PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")
"""The package managers, in the order their commands run."""
ENVIRONMENT_KEYS = (
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
"""The keys an environment may have (a profile's table, the Python API's mapping)."""
_HOST_KEYS = ("network_allowed_hosts", "setup_network_allowed_hosts")
_SCALAR_KEYS = ("timeout", "image", "memory", "cpus", "network", "pids_limit")

SpecFields = Mapping[str, Any]
"""An environment as given: keys of :data:`ENVIRONMENT_KEYS`, values not yet checked."""


def parse_package(text: str) -> tuple[str, str]:
    """``"pip:requests==2.32.3"`` -> ``("pip", "requests==2.32.3")``; :class:`InvalidInput` if not.

    The name is everything after the first ``:`` and is passed to the package
    manager verbatim, as one argument.
    """
    manager, sep, name = text.partition(":")
    if not sep or not name:
        raise InvalidInput(
            f"package {text!r} must be MANAGER:NAME, for example pip:requests==2.32.3 "
            f"(managers: {', '.join(PACKAGE_MANAGERS)})"
        )
    if manager not in PACKAGE_MANAGERS:
        raise InvalidInput(
            f"package {text!r} names the unknown package manager {manager!r} "
            f"(managers: {', '.join(PACKAGE_MANAGERS)})"
        )
    return manager, name


def merge_fields(base: SpecFields, override: SpecFields) -> dict[str, Any]:
    """``override`` on top of ``base``; package lists are joined per manager, not replaced."""
    merged = dict(base)
    for key, value in override.items():
        if (
            key == "packages"
            and isinstance(value, Mapping)
            and isinstance(merged.get(key), Mapping)
        ):
            packages = {manager: list(names) for manager, names in merged[key].items()}
            for manager, names in value.items():
                packages[manager] = [*packages.get(manager, []), *names]
            merged[key] = packages
        else:
            merged[key] = value
    return merged


def _names(value: object, what: str, problems: list[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        problems.append(f"{what} must be a list of strings, got {type(value).__name__}")
        return ()
    return tuple(value)


def _hosts(key: str, value: object, problems: list[str]) -> tuple[str, ...]:
    valid = []
    for host in _names(value, key, problems):
        try:
            valid.append(validate_host(host))
        except InvalidInput as exc:
            problems.append(f"{key}: {exc}")
    return tuple(valid)


def _packages(value: object, problems: list[str]) -> PackagePlan:
    if not isinstance(value, Mapping):
        problems.append(f"packages must map a package manager to names, got {value!r}")
        return PackagePlan()
    plan: dict[str, tuple[str, ...]] = {}
    for manager, names in value.items():
        if manager not in PACKAGE_MANAGERS:
            problems.append(
                f"packages: unknown package manager {manager!r} "
                f"(managers: {', '.join(PACKAGE_MANAGERS)})"
            )
            continue
        try:
            plan[manager] = getattr(
                PackagePlan(**{manager: _names(names, manager, problems)}), manager
            )
        except InvalidInput as exc:
            problems.append(f"packages.{manager}: {exc}")
    return PackagePlan(**plan)


def spec_from_fields(fields: SpecFields) -> tuple[SandboxSpec, tuple[str, ...]]:
    """The spec of ``fields`` and every problem found in them (empty: all of it was valid).

    A field with a problem is left out of the spec (an invalid host out of
    its list), so the spec is what the valid rest asks for, and admission
    can still say what the provider cannot do with it. ``network_allowed_hosts``
    given (even if every host was invalid) counts as an allowlist.
    """
    problems: list[str] = []
    unknown = sorted(set(fields) - set(ENVIRONMENT_KEYS))
    if unknown:
        problems.append(
            f"unknown environment keys {unknown} (known: {', '.join(ENVIRONMENT_KEYS)})"
        )
    values: dict[str, Any] = {}
    for key in _SCALAR_KEYS:
        if key not in fields or fields[key] is None:
            continue
        try:
            values[key] = getattr(SandboxSpec(**{key: fields[key]}), key)
        except (InvalidInput, TypeError, ValueError) as exc:
            problems.append(f"{key}: {exc}")
    for key in _HOST_KEYS:
        if key in fields:
            values[key] = _hosts(key, fields[key], problems)
    if "packages" in fields:
        values["packages"] = _packages(fields["packages"], problems)
    spec = SandboxSpec(**values)
    given_hosts = any(key in fields and fields[key] for key in _HOST_KEYS)
    kept = spec.network_allowed_hosts or spec.setup_network_allowed_hosts
    if given_hosts and not kept and spec.network is not NetworkMode.LIMITED:
        # Every host was invalid; the allowlist was still asked for (admission
        # reports a kept one itself).
        problems.append(f"network allowlists need network 'limited', not {spec.network.value!r}")
    return spec, tuple(problems)
