"""Package installation: the fixed order of package-manager commands."""

from __future__ import annotations

import attrs

from mango.domain.deadline import maintenance_timeout
from mango.domain.errors import PackageSetupFailed, PackageSetupInterrupted
from mango.domain.ports import Sandbox
from mango.domain.values import Command, PackagePlan, SandboxSpec

# PackageSetupFailed and PackageSetupInterrupted live in mango.domain.errors; re-exported here.
__all__ = ["PackageSetupFailed", "PackageSetupInterrupted", "install_packages", "package_commands"]


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
    """Run each command of ``spec.packages`` in order and stop at the first failure.

    Each command's timeout is what remains of the caller's deadline
    (:func:`~mango.domain.deadline.maintenance_timeout`), else the spec's
    default, so setup never outlives the activity that waits for it.

    A non-zero exit raises :class:`PackageSetupFailed` (permanent: a misspelt
    package fails the same way on every retry); a timed-out or cancelled
    command raises :class:`PackageSetupInterrupted` (retryable). Provider
    errors such as :class:`~mango.domain.errors.ProviderUnavailable` pass
    through with their own verdict.
    """
    for manager, command in package_commands(spec.packages):
        bounded = attrs.evolve(command, timeout=maintenance_timeout(spec))
        result = await sandbox.exec(bounded)
        if result.exit_code != 0 or result.timed_out or result.cancelled:
            detail = (result.stderr.strip() or result.stdout.strip())[-2000:]
            text = detail.decode("utf-8", "replace") or "package manager exited unsuccessfully"
            if result.timed_out or result.cancelled:
                outcome = "timed out" if result.timed_out else "cancelled"
                raise PackageSetupInterrupted(f"install {manager} packages: {outcome}: {text}")
            raise PackageSetupFailed(f"install {manager} packages: exit {result.exit_code}: {text}")
