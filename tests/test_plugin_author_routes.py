"""A plugin author outside the repository: the guide's project and routes, followed for real.

``docs/plugin-authors.md`` builds ``mango-provider-tinybox`` in an empty
directory and tells an author whose index lacks mango how to get
``mango-core`` and ``mango-conformance``: wheels built from a checkout, a git
URL, a local index. Here the project is built from the guide's text
(:mod:`tests.guide`), installed into a fresh venv from freshly built wheels
and run as section 6 runs it; each route is taken into a fresh venv, the git
URL also with the pip that ``python -m venv`` ships.
"""

from __future__ import annotations

import functools
import http.server
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .guide import build_project, section
from .support import REPO, Venv, run

GUIDE_CLONE = "file:///home/you/src/mango@main"
"""The clone the guide's git route names; the tests put this repository's in its place."""


def _section(output: str) -> list[str]:
    """The lines of the ``mango-conformance`` section of a pytest run."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "= mango-conformance =" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1 : end]


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, Path]:
    """A private HOME and state directory (the conformance run needs no database)."""
    (tmp_path / "home").mkdir()
    return tmp_path / "home", tmp_path / "state"


@pytest.mark.slow
def test_the_guide_builds_a_provider_that_passes_outside_the_repository(
    wheelhouse: Path, tmp_path: Path, home: tuple[Path, Path]
) -> None:
    """The project the guide's text makes installs from built wheels and passes the suite."""
    project = build_project(tmp_path)
    venv = Venv.create(tmp_path / "venv")
    # Section 6: pip install --find-links ~/mango-wheels -e '.[test]'
    venv.install("-e", f"{project}[test]", find_links=wheelhouse)
    env = venv.environ(*home)

    listed = run([str(venv.bin / "mango"), "providers"], env=env, cwd=project).stdout
    assert "tinybox" in listed

    # Section 6: pytest -q (the CI profile here: the same checks, fewer examples)
    tests = subprocess.run(
        [str(venv.bin / "pytest"), "-q", "-p", "no:cacheprovider", "--mango-profile", "offline-ci"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = tests.stdout + tests.stderr
    assert tests.returncode == 0, output[-6000:]
    verdict = [line for line in _section(tests.stdout) if line.startswith("conformant")]
    assert verdict, output[-3000:]
    assert verdict[0].startswith("conformant with 0 waiver(s): "), output[-3000:]
    for warning in ("warnings summary", "Warning:"):  # pytest-asyncio's on a bare config
        assert warning not in output, output[-6000:]

    completed = subprocess.run(
        [str(venv.bin / "mango-conformance"), "run", "tinybox", "--profile", "offline-ci"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-6000:]
    assert "lifecycle machine (tinybox): up to 100 examples of up to 40 steps" in output
    last = _section(completed.stdout)[-1]
    assert last.startswith("conformant with 0 waiver(s): "), output[-3000:]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        """Keep the test's output clean."""


@pytest.fixture
def local_index(wheelhouse: Path) -> Iterator[str]:
    """The wheel directory served over HTTP on 127.0.0.1, as the guide's local index."""
    handler = functools.partial(_QuietHandler, directory=str(wheelhouse))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _conformance_targets(venv: Venv, home: tuple[Path, Path]) -> str:
    return run([str(venv.bin / "mango-conformance"), "list"], env=venv.environ(*home)).stdout


@pytest.mark.slow
def test_mango_installs_from_a_local_index(
    local_index: str, tmp_path: Path, home: tuple[Path, Path]
) -> None:
    """pip/uv --find-links http://host/ over a served wheel directory gets both distributions."""
    venv = Venv.create(tmp_path / "venv")
    venv.install("--find-links", local_index, "mango-core", "mango-conformance")
    assert _conformance_targets(venv, home).startswith("local\t")


def git_route() -> list[str]:
    """The requirements of section 0's git-URL command, pointing at this checkout's HEAD."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    (block,) = [s for s in section("0. Getting") if "git+file://" in s.body and s.lang == "console"]
    command = block.body.replace("\\\n", " ").splitlines()[0]
    argv = shlex.split(command.removeprefix("$ "))
    assert argv[:2] == ["pip", "install"], command
    commit = run(["git", "rev-parse", "HEAD"], cwd=REPO).stdout.strip()
    requirements = [arg.replace(GUIDE_CLONE, f"file://{REPO}@{commit}") for arg in argv[2:]]
    assert all(GUIDE_CLONE not in arg for arg in requirements)
    assert len(requirements) == 2
    return requirements


@pytest.mark.slow
def test_mango_installs_from_a_git_url(tmp_path: Path, home: tuple[Path, Path]) -> None:
    """The guide's git URLs (#subdirectory=) build mango-core and mango-conformance."""
    venv = Venv.create(tmp_path / "venv")
    venv.install(*git_route())
    assert _conformance_targets(venv, home).startswith("local\t")


@pytest.mark.slow
def test_the_git_url_form_suits_the_pip_a_fresh_venv_ships(tmp_path: Path) -> None:
    """``python -m venv``'s pip (23.2.1 on Python 3.11) accepts the guide's git requirements.

    No index is needed for what this checks: the build backend is put into the
    venv first and pip builds without isolation or dependencies.
    """
    requirements = git_route()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    Venv(venv).install("hatchling>=1.27")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    version = run([*pip, "--version"]).stdout.strip()
    installed = subprocess.run(
        [*pip, "install", "--no-build-isolation", "--no-deps", "--no-index", *requirements],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, f"{version}\n{installed.stdout}\n{installed.stderr}"
    shown = run([*pip, "show", "mango-core", "mango-conformance"]).stdout
    assert shown.count("Version: 0.1.0") == 2, shown
