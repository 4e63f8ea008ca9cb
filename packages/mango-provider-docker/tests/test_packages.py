"""Real package installs on Docker: ``mango exec --package`` with apt and pip, no internet.

A server started here on the Docker bridge's host address serves a flat apt
repository and a PEP 503 index of tiny packages built in memory (real
``.deb`` files and wheels, :mod:`mango_provider_docker.repository`); the
image is the Debian of ``.ci/make-debian-image`` with those two sources
configured. ``mango exec`` runs as a subprocess (embedded PostgreSQL,
``MANGO_SANDBOX=docker``): real ``apt-get`` and real ``pip`` install, and the
programs they installed run. The spec asks for no network, so the bridge is
the sandbox's only while its packages install.

One server and one image serve the whole module; each test uses one Session
(one container) for all it checks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import pytest

from mango.provider import PackagePlan, SandboxSpec
from mango.provider.ownership import Ownership
from mango_provider_docker import DockerProvider, Engine
from mango_provider_docker.network import connected_networks
from mango_provider_docker.packageserver import PackageServer
from mango_provider_docker.testimages import (
    BASE_IMAGE,
    BASE_IMAGE_HINT,
    bridge_gateway,
    derived_image,
    served_sources,
)

from .conftest import RUN_ID
from .helpers import eventually, sh

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.slow]

MANGO = Path(sys.executable).with_name("mango")
FAULTY_MANGO = Path(__file__).parents[2] / "mango-core" / "tests" / "faulty_mango.py"
# This process's own: container names derive from namespace and Session id, and
# the daemon is shared with every other test process (other xdist workers, other
# runs), whose containers of the same fixed name would be refused as foreign.
NAMESPACE = f"pkg-{RUN_ID}"
APT = ("mango-probe-apt", "mango-probe-slow")
PIP = ("mango-probe-pip",)
SLOW_DEB = "apt/mango-probe-slow_1.0_all.deb"
INTERFACES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
MANAGERS_RUNNING = (
    # The pattern is put together at run time, so this script never matches itself.
    'a=apt; d=dpk; for f in /proc/[0-9]*/cmdline; do c=$(tr "\\0" " " < "$f" 2>/dev/null); '
    'case "$c" in *"$a-get"*|*"${d}g "*) echo "$c";; esac; done'
)
"""Prints the command line of every apt-get and dpkg process in the container."""


@pytest.fixture(scope="module")
async def package_server(docker_engine: Engine) -> AsyncIterator[PackageServer]:
    """The repositories of :data:`APT` and :data:`PIP` on the Docker bridge."""
    server = PackageServer.of(await bridge_gateway(docker_engine), apt=APT, pip=PIP)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="module")
async def package_image(docker_engine: Engine, package_server: PackageServer) -> AsyncIterator[str]:
    """The Debian test image with the server's apt and pip sources configured."""
    if not await docker_engine.image_exists(BASE_IMAGE):
        pytest.fail(f"the package tests need {BASE_IMAGE}: {BASE_IMAGE_HINT}")
    image = await derived_image(
        docker_engine,
        served_sources(package_server.url, package_server.host),
        repo="mango-test-served",
    )
    try:
        yield image
    finally:
        await docker_engine.call(
            f"remove image {image}", "DELETE", f"images/{image}", expected={404, 409}
        )


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711, not pytest's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="mango-docker-packages-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def mango(package_image: str, state_dir: Path) -> AsyncIterator[Mango]:
    """``mango`` on ``state_dir``: its commands share one embedded PostgreSQL, then stopped."""
    made = Mango(state_dir, package_image)
    try:
        yield made
    finally:
        await made.run("embedded", "stop")


@attrs.frozen
class Mango:
    """``mango`` (or the crash-injecting entry point) with this test's environment."""

    state_dir: Path
    image: str

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "MANGO_STATE_DIR": str(self.state_dir),
            "MANGO_SANDBOX": "docker",
            "MANGO_SANDBOX_IMAGE": self.image,
            "MANGO_SANDBOX_RESOURCE_DIR": str(self.state_dir / "resources"),
            "MANGO_SANDBOX_PULL": "0",
            "MANGO_NAMESPACE": NAMESPACE,
            # One embedded PostgreSQL for the test's commands (stopped by the fixture).
            "MANGO_EMBEDDED_IDLE_SECONDS": "120",
            **(extra or {}),
        }
        env.pop("MANGO_DATABASE_URL", None)
        env.pop("MANGO_TEMPORAL_ADDRESS", None)
        return env

    async def start(
        self, *args: str, extra: dict[str, str] | None = None
    ) -> asyncio.subprocess.Process:
        program = [str(MANGO)]
        if extra and "MANGO_FAULT_POINT" in extra:
            program = [sys.executable, str(FAULTY_MANGO)]
        return await asyncio.create_subprocess_exec(
            *program,
            *args,
            env=self.environ(extra),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def run(self, *args: str, extra: dict[str, str] | None = None) -> tuple[int, str, str]:
        process = await self.start(*args, extra=extra)
        async with asyncio.timeout(300):
            stdout, stderr = await process.communicate()
        assert process.returncode is not None
        return process.returncode, stdout.decode(), stderr.decode()


def _container_name(session: str) -> str:
    return Ownership("docker", NAMESPACE).name(session)


async def _sessions(mango: Mango) -> dict[str, str]:
    code, out, err = await mango.run("sessions", "list", "--json")
    assert code == 0, err
    return {row["session_id"]: row["state"] for row in json.loads(out)}


async def _remove(engine: Engine, session: str) -> None:
    leftover = await engine.inspect_container(_container_name(session))
    if leftover is not None:
        await engine.remove_container(str(leftover["Id"]))


async def _managers_gone(mango: Mango, session: str) -> None:
    """Wait until no package manager a killed ``mango`` started still runs in the container."""
    provider = DockerProvider(
        mango.state_dir / "resources",
        namespace=NAMESPACE,
        image=mango.image,
        host=os.environ.get("DOCKER_HOST", "").strip() or None,
        pull_missing_images=False,
    )
    spec = SandboxSpec(packages=PackagePlan(apt=["mango-probe-slow"]))
    try:
        # create() adopts the existing container (its setup network untouched).
        sandbox = await provider.create(session, spec)

        async def gone() -> bool:
            result = await sandbox.exec(sh(MANAGERS_RUNNING))
            assert result.exit_code == 0, result
            return not result.stdout.strip()

        await eventually(gone, 120.0, "the killed worker's apt-get ending")
    finally:
        await provider.aclose()


async def test_apt_and_pip_install_for_real_and_the_network_is_only_for_setup(
    docker_engine: Engine, mango: Mango
) -> None:
    """--package apt:... pip:... installs, says so, runs; the bound container has loopback only."""
    session = "pkg-real"
    try:
        code, out, err = await mango.run(
            "exec", "--session", session,
            "--package", "apt:mango-probe-apt", "--package", "pip:mango-probe-pip",
            "--", "sh", "-c", f"mango-probe-apt && mango-probe-pip && {INTERFACES}",
        )  # fmt: skip
        assert code == 0, err
        assert out.split() == ["mango-probe-apt", "mango-probe-pip", "lo"]
        apt_install = "apt-get install -y --no-install-recommends mango-probe-apt"
        for line in (
            "mango: installing apt packages: apt-get update",
            f"mango: installing apt packages: {apt_install}",
            "mango: installing pip packages: python3 -m pip install mango-probe-pip",
        ):
            assert line in err.splitlines(), err
        inspect = await docker_engine.inspect_container(_container_name(session))
        assert inspect is not None
        assert connected_networks(inspect) == set()
        # Later commands need not repeat the packages: the binding proves them.
        code, out, err = await mango.run("exec", "--session", session, "--", "mango-probe-pip")
        assert (code, out) == (0, "mango-probe-pip\n"), err
        assert "installing" not in err
        assert (await _sessions(mango))[session] == "bound"
    finally:
        await mango.run("sessions", "delete", session)
        await _remove(docker_engine, session)


async def test_a_manager_the_image_lacks_is_named_and_nothing_is_bound(
    docker_engine: Engine, mango: Mango
) -> None:
    """npm is not in the image: exit 2 naming it; the intent stays, no binding, no network."""
    session = "pkg-no-npm"
    try:
        code, _, err = await mango.run(
            "exec", "--session", session, "--package", "npm:left-pad", "--", "true"
        )
        assert code == 2
        assert "install npm packages: exit 127: npm is not in the sandbox's image" in err, err
        assert (await _sessions(mango))[session] == "provisioning"
        inspect = await docker_engine.inspect_container(_container_name(session))
        assert inspect is not None
        assert connected_networks(inspect) == set()
    finally:
        await mango.run("sessions", "delete", session)
        await _remove(docker_engine, session)


async def test_a_crash_mid_setup_is_finished_on_the_same_container(
    docker_engine: Engine, package_server: PackageServer, mango: Mango
) -> None:
    """SIGKILL while apt downloads, then a crash after setup: each retry finishes the same one."""
    session = "pkg-crash"
    args = ("exec", "--session", session, "--package", "apt:mango-probe-slow", "--")
    name = _container_name(session)
    try:
        arrived, release = package_server.hold(SLOW_DEB)
        first = await mango.start(*args, "true")
        async with asyncio.timeout(180):
            await arrived.wait()
        first.send_signal(signal.SIGKILL)
        await first.wait()
        before = await docker_engine.inspect_container(name)
        assert before is not None
        assert (await _sessions(mango))[session] == "provisioning"
        # The dead worker's apt-get gets its file and ends on its own before the retry.
        release.set()
        await _managers_gone(mango, session)
        # A second crash, after the whole setup ran again but before the binding.
        code, _, err = await mango.run(*args, "true", extra={"MANGO_FAULT_POINT": "after-setup"})
        assert code == -signal.SIGKILL, err
        assert "installing apt packages" in err
        code, out, err = await mango.run(*args, "mango-probe-slow")
        assert (code, out) == (0, "mango-probe-slow\n"), err
        after = await docker_engine.inspect_container(name)
        assert after is not None
        assert after["Id"] == before["Id"]
        assert connected_networks(after) == set()
        assert (await _sessions(mango))[session] == "bound"
    finally:
        package_server.held.pop(SLOW_DEB, None)
        await mango.run("sessions", "delete", session)
        await _remove(docker_engine, session)
