"""Package installation: the fixed order of package-manager commands."""

from __future__ import annotations

import attrs

from mango.domain.deadline import maintenance_timeout
from mango.domain.errors import MangoError
from mango.domain.ports import Sandbox
from mango.domain.values import Command, PackagePlan, SandboxSpec

__all__ = ["PackageSetupFailed", "install_packages", "package_commands"]


class PackageSetupFailed(MangoError):
    """A package manager failed; the sandbox stays unbound and a retry re-runs setup."""


def package_commands(plan: PackagePlan) -> list[tuple[str, Command]]:
    """The argv vectors that install ``plan``, in the fixed manager order.

    Package names are passed verbatim as arguments, never through a shell.
    """
    commands: list[tuple[str, Command]] = []
    if plan.apt:
        commands.append(("apt", Command(("apt-get", "update"))))
        commands.append(
            ("apt", Command(("apt-get", "install", "-y", "--no-install-recommends", *plan.apt)))
        )
    if plan.cargo:
        commands.append(("cargo", Command(("cargo", "install", *plan.cargo))))
    if plan.gem:
        commands.append(("gem", Command(("gem", "install", *plan.gem))))
    if plan.go:
        commands.append(("go", Command(("go", "install", *plan.go))))
    if plan.npm:
        commands.append(("npm", Command(("npm", "install", "--global", *plan.npm))))
    if plan.pip:
        commands.append(("pip", Command(("python3", "-m", "pip", "install", *plan.pip))))
    return commands


async def install_packages(sandbox: Sandbox, spec: SandboxSpec) -> None:
    """Run each command of ``spec.packages`` in order; the first failure raises.

    Each command's timeout is what remains of the caller's deadline
    (:func:`~mango.domain.deadline.maintenance_timeout`), else the spec's
    default, so setup never outlives the activity that waits for it.
    Raises :class:`PackageSetupFailed`.
    """
    for manager, command in package_commands(spec.packages):
        bounded = attrs.evolve(command, timeout=maintenance_timeout(spec))
        result = await sandbox.exec(bounded)
        if result.exit_code != 0 or result.timed_out or result.cancelled:
            detail = (result.stderr.strip() or result.stdout.strip())[-2000:]
            text = detail.decode("utf-8", "replace") or "package manager exited unsuccessfully"
            outcome = "timed out" if result.timed_out else f"exit {result.exit_code}"
            raise PackageSetupFailed(f"install {manager} packages: {outcome}: {text}")
