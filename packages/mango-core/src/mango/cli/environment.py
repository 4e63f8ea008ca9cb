"""The environment options of ``mango exec``: profile, packages, network and allowed hosts.

They build the environment a Session's sandbox is provisioned with (on its
first use) and admit it before anything is written: a spec the provider
cannot run exits 2 with every reason and leaves no Session row, intent or
workflow behind, on the direct path and with ``--via-temporal`` alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mango.cli.common import fail
from mango.config import Settings
from mango.domain.environments import PACKAGE_MANAGERS
from mango.domain.errors import MangoError
from mango.domain.values import NetworkMode, SandboxSpec

__all__ = ["environment_options", "resolve_environment"]

F = TypeVar("F", bound=Callable[..., Any])


def environment_options(command: F) -> F:
    """Add the environment options to a click command (as ``profile``, ``packages``, ...)."""
    options = [
        click.option(
            "--profile",
            metavar="NAME",
            help="Environment profile (MANGO_PROFILES_FILE, or the built-in 'cloud': "
            "120 s timeout, bridge network).",
        ),
        click.option(
            "--package",
            "packages",
            multiple=True,
            metavar="MANAGER:NAME",
            help="Install a package before the sandbox is first used (repeatable; "
            f"managers: {', '.join(PACKAGE_MANAGERS)}), e.g. --package pip:requests==2.32.3.",
        ),
        click.option(
            "--network",
            type=click.Choice([mode.value for mode in NetworkMode]),
            help="The sandbox's network (default: the profile's, else none).",
        ),
        click.option(
            "--allow-host",
            "allow_hosts",
            multiple=True,
            metavar="HOST",
            help="With --network limited: a host the sandbox may reach (repeatable).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def resolve_environment(
    settings: Settings,
    profile: str | None,
    packages: tuple[str, ...],
    network: str | None,
    allow_hosts: tuple[str, ...],
) -> SandboxSpec:
    """The admitted spec, or ``error:`` with every reason and exit 2 (nothing opened yet)."""
    from mango.runtime import resolve_spec

    overrides: dict[str, Any] = {}
    if network is not None:
        overrides["network"] = network
    if allow_hosts:
        overrides["network_allowed_hosts"] = list(allow_hosts)
    try:
        return resolve_spec(settings, profile, packages=packages, overrides=overrides)
    except MangoError as exc:
        fail(str(exc), exc.hint)
