"""Package setup verdicts on a real local sandbox: a failed install is permanent, a timeout not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mango.app.packages import PackageSetupFailed, PackageSetupInterrupted, install_packages
from mango.domain import PackagePlan, SandboxSpec, is_permanent
from mango.local import LocalProvider


async def test_a_failing_package_manager_is_permanent(tmp_path: Path) -> None:
    """A manager that exits non-zero (here: not installed at all) fails for good."""
    if shutil.which("gem", path="/usr/local/bin:/usr/bin:/bin"):
        pytest.skip("gem is installed here; the test needs a missing package manager")
    provider = LocalProvider(tmp_path / "sandboxes")
    sandbox = await provider.create("s1", SandboxSpec())
    try:
        with pytest.raises(PackageSetupFailed, match="install gem packages: exit") as caught:
            await install_packages(
                sandbox, SandboxSpec(packages=PackagePlan(gem=["no-such-gem-mango"]))
            )
        assert is_permanent(caught.value)
    finally:
        await sandbox.destroy()
        await provider.aclose()


async def test_a_timed_out_install_is_retryable(tmp_path: Path) -> None:
    """A command that runs out of time says nothing about the plan: retry."""
    provider = LocalProvider(tmp_path / "sandboxes")
    # No interpreter starts within a millisecond, so the install always times out.
    sandbox = await provider.create("s1", SandboxSpec(timeout=0.001))
    try:
        with pytest.raises(PackageSetupInterrupted, match="timed out") as caught:
            await install_packages(
                sandbox, SandboxSpec(timeout=0.001, packages=PackagePlan(pip=["attrs"]))
            )
        assert not is_permanent(caught.value)
    finally:
        await sandbox.destroy()
        await provider.aclose()
