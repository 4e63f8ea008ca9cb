"""Package installation: the fixed order of package-manager commands.

Each command is an argument vector run through ``Sandbox.exec`` (never a
shell string: a package name such as ``"; touch x"`` is one argument), in
the order apt, cargo, gem, go, npm, pip. What each command installs is
reported as progress (:mod:`mango.domain.progress`): ``mango exec`` prints
it, and a Temporal activity sends it in its heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import shlex

import attrs

from mango.domain.deadline import maintenance_timeout
from mango.domain.errors import PackageSetupFailed, PackageSetupInterrupted
from mango.domain.ports import PackageSetupSandbox, Sandbox
from mango.domain.progress import report_progress
from mango.domain.values import Command, PackagePlan, SandboxSpec

log = logging.getLogger("mango.app.packages")

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

    A sandbox that implements :class:`~mango.domain.ports.PackageSetupSandbox`
    gets :meth:`~mango.domain.ports.PackageSetupSandbox.begin_package_setup`
    first and ``end_package_setup`` afterwards (after a failure too, best
    effort: the failure is what the caller sees). Each command's timeout is
    what remains of the caller's deadline
    (:func:`~mango.domain.deadline.maintenance_timeout`), else the spec's
    default, so setup never outlives the activity that waits for it.

    A non-zero exit raises :class:`PackageSetupFailed` (permanent: a misspelt
    package fails the same way on every retry); a timed-out or cancelled
    command raises :class:`PackageSetupInterrupted` (retryable). Provider
    errors such as :class:`~mango.domain.errors.ProviderUnavailable` pass
    through with their own verdict. A manager the image lacks fails like
    any other (exit 127, ``install pip packages: exit 127: ...``).
    """
    commands = package_commands(spec.packages)
    if not commands:
        return
    setup = sandbox if isinstance(sandbox, PackageSetupSandbox) else None
    if setup is not None:
        await setup.begin_package_setup()
    try:
        for manager, command in commands:
            await _run(sandbox, spec, manager, command)
    except BaseException:
        if setup is not None:
            await _end_after_failure(setup)
        raise
    if setup is not None:
        await setup.end_package_setup()


async def _run(sandbox: Sandbox, spec: SandboxSpec, manager: str, command: Command) -> None:
    report_progress(f"installing {manager} packages: {shlex.join(command.argv)}")
    bounded = attrs.evolve(command, timeout=maintenance_timeout(spec))
    result = await sandbox.exec(bounded)
    if result.exit_code != 0 or result.timed_out or result.cancelled:
        detail = (result.stderr.strip() or result.stdout.strip())[-2000:]
        text = detail.decode("utf-8", "replace") or "package manager exited unsuccessfully"
        if result.exit_code == 127 and not result.timed_out and not result.cancelled:
            text = f"{command.argv[0]} is not in the sandbox's image ({text})"
        if result.timed_out or result.cancelled:
            outcome = "timed out" if result.timed_out else "cancelled"
            raise PackageSetupInterrupted(f"install {manager} packages: {outcome}: {text}")
        raise PackageSetupFailed(
            f"install {manager} packages: exit {result.exit_code}: {text}",
            hint="nothing was bound: run it again once the image or the package names are "
            "fixed, or delete the session to start over with another package plan",
        )


async def _end_after_failure(setup: PackageSetupSandbox) -> None:
    """End the setup after a failed command; the command's failure is what the caller sees."""
    try:
        await asyncio.shield(setup.end_package_setup())
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - must not mask the failure that stopped setup
        log.warning("could not end package setup after a failure: %s", exc)
