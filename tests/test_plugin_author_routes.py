"""A plugin author outside the repository: the routes of the guide's section 0, followed for real.

``docs/plugin-authors.md`` tells an author whose index lacks mango how to get
``mango-core`` and ``mango-conformance``: wheels built from a checkout, a git
URL, a local index. Each route is taken here into a fresh venv, and the
guide's example provider is copied out of the repository, installed from
freshly built wheels and run through ``mango-conformance run tinybox``.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import REPO, Venv, run

EXAMPLE = REPO / "docs" / "example-provider"


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
def test_example_provider_outside_the_repository(
    wheelhouse: Path, tmp_path: Path, home: tuple[Path, Path]
) -> None:
    """docs/example-provider, copied out, installs from built wheels and passes the suite."""
    project = tmp_path / "mango-provider-tinybox"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".*cache"))
    venv = Venv.create(tmp_path / "venv")
    # The guide's first route: pip install --find-links ~/mango-wheels -e '.[test]'
    venv.install("-e", f"{project}[test]", find_links=wheelhouse)
    env = venv.environ(*home)

    listed = run([str(venv.bin / "mango"), "providers"], env=env, cwd=project).stdout
    assert "tinybox" in listed

    conformance = str(venv.bin / "mango-conformance")
    completed = subprocess.run(
        [conformance, "run", "tinybox", "--profile", "offline-ci"],
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


@pytest.mark.slow
def test_mango_installs_from_a_git_url(tmp_path: Path, home: tuple[Path, Path]) -> None:
    """A git URL with #subdirectory= builds mango-core and mango-conformance from the repository."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    commit = run(["git", "rev-parse", "HEAD"], cwd=REPO).stdout.strip()
    url = f"git+file://{REPO}@{commit}"
    venv = Venv.create(tmp_path / "venv")
    venv.install(
        f"mango-core @ {url}#subdirectory=packages/mango-core",
        f"mango-conformance @ {url}#subdirectory=packages/conformance",
    )
    assert _conformance_targets(venv, home).startswith("local\t")
