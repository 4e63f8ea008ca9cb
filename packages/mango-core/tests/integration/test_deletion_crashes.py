"""SIGKILL at every step of a deletion, then ``mango reconcile``: nothing of the Session is left.

Real processes, real PostgreSQL, the local provider and the Docker provider
(a real daemon; skipped without one unless ``MANGO_REQUIRE_DOCKER=1``). For
each provider, each shape of Session (bound, with a command still running in
it; intent-only, as a crash during provisioning leaves it) and each deletion
fault point reachable for that shape, the process that deletes is SIGKILLed
at that point, either

* ``mango sessions delete`` itself (the direct path), or
* a ``mango reconcile`` finishing a deletion that an earlier crash left,

and then a clean ``mango reconcile`` runs. Afterwards the Session has no row,
binding or intent, nothing of it is on disk (session directory, leftovers,
run and owner records, host directory) or in the daemon (containers of the
deployment's namespace), and a command that was running got the "deleted"
answer: leaked, lost and duplicated resources all 0.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import attrs
import pytest

from mango.postgres import open_store
from mango.provider.ownership import Ownership
from mango.temporal.faults import FaultPoint

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MANGO = str(Path(sys.executable).with_name("mango"))
MANGO_WITH_FAULTS = [sys.executable, str(Path(__file__).parents[1] / "faulty_mango.py")]
"""``mango`` with crash injection (``MANGO_FAULT_POINT``): the recovery tests' entry."""
DOCKER_IMAGE = "mango-test-busybox:latest"
SIGKILLED = -signal.SIGKILL
SESSION = "doomed"
MANY_FILES = "mkdir -p d && i=0 && while [ $i -lt 2000 ]; do : > d/f$i; i=$((i+1)); done"

BOUND_POINTS = [
    FaultPoint.AFTER_FENCE,
    FaultPoint.AFTER_RENAME,
    FaultPoint.AFTER_REMOVAL,
    FaultPoint.DURING_DESTROY,
    FaultPoint.AFTER_BINDING_REMOVED,
]
INTENT_ONLY_POINTS = [
    FaultPoint.AFTER_FENCE,
    FaultPoint.AFTER_RENAME,
    FaultPoint.AFTER_REMOVAL,
    FaultPoint.DURING_DESTROY,
    FaultPoint.AFTER_INTENT_REMOVED,
]
CASES = [
    *(("bound", point) for point in BOUND_POINTS),
    *(("intent-only", point) for point in INTENT_ONLY_POINTS),
]


@attrs.define
class Deployment:
    """One deployment driven through the ``mango`` command line."""

    provider: str
    database_url: str
    root: Path
    namespace: str = attrs.field(factory=lambda: f"crash-{uuid.uuid4().hex[:10]}")

    @property
    def base(self) -> Path:
        """The provider's host directory: local sandboxes or Docker host directories."""
        return self.root / self.provider

    def env(self, fault: FaultPoint | None = None) -> dict[str, str]:
        """The environment of one ``mango`` process."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MANGO_")}
        env.update(
            MANGO_DATABASE_URL=self.database_url,
            MANGO_STATE_DIR=str(self.root / "state"),
            MANGO_SANDBOX=self.provider,
            MANGO_NAMESPACE=self.namespace,
            MANGO_LOCAL_SANDBOX_DIR=str(self.root / "local"),
            MANGO_SANDBOX_RESOURCE_DIR=str(self.root / "docker"),
            MANGO_SANDBOX_IMAGE=DOCKER_IMAGE,
            MANGO_SANDBOX_PULL="0",
        )
        if fault is not None:
            env["MANGO_FAULT_POINT"] = fault.value
        return env

    def run(
        self, *args: str, fault: FaultPoint | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``mango ARGS`` to its end."""
        command = [MANGO] if fault is None else MANGO_WITH_FAULTS
        return subprocess.run(
            [*command, *args], capture_output=True, env=self.env(fault), timeout=180, check=False
        )

    def crash(self, *args: str, fault: FaultPoint) -> None:
        """Run ``mango ARGS`` and check that it killed itself at ``fault``."""
        crashed = self.run(*args, fault=fault)
        assert crashed.returncode == SIGKILLED, crashed.stderr.decode()
        assert f"at {fault.value}" in crashed.stderr.decode()

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """Start ``mango ARGS`` in the background."""
        return subprocess.Popen(
            [MANGO, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env(),
        )

    def remnants(self) -> list[str]:
        """Everything left under the provider's host directory (mango's empty trees left out)."""
        if not self.base.exists():
            return []
        return [
            str(path.relative_to(self.base))
            for path in sorted(self.base.rglob("*"))
            if not (path.name in (".owners", ".runs") and not any(path.iterdir()))
        ]

    async def containers(self) -> list[str]:
        """Ids of the daemon's containers in this deployment's namespace."""
        if self.provider != "docker":
            return []
        from mango_provider_docker import Engine

        engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
        try:
            listed = await engine.list_containers(Ownership("docker", self.namespace).selector())
        finally:
            await engine.aclose()
        return [str(item["Id"]) for item in listed]

    async def remove_containers(self) -> None:
        """Remove what a failed test left in the daemon."""
        if self.provider != "docker":
            return
        from mango_provider_docker import Engine

        engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
        try:
            for item in await engine.list_containers(
                Ownership("docker", self.namespace).selector()
            ):
                await engine.remove_container(str(item["Id"]))
        finally:
            await engine.aclose()


@pytest.fixture
def deployment(provider_name: str, database_url: str, tmp_path: Path) -> Deployment:
    """A deployment of ``provider_name`` on this test's database and directories."""
    root = tmp_path / "deployment"
    root.mkdir()
    root.chmod(0o711)
    return Deployment(provider_name, database_url, root)


def first_line(process: subprocess.Popen[bytes], bound: float = 60.0) -> bytes:
    """The first line a background process prints (bounded)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], bound)
    assert ready, "the background command printed nothing"
    return process.stdout.readline()


async def prepare(deployment: Deployment, shape: str) -> subprocess.Popen[bytes] | None:
    """Make the Session in ``shape``; for a bound one, return a command left running in it."""
    if shape == "intent-only":
        # A crash right after create leaves the intent and the resource, no binding.
        deployment.crash("exec", "--session", SESSION, "--", "true", fault=FaultPoint.AFTER_CREATE)
        return None
    made = deployment.run("exec", "--session", SESSION, "--", "sh", "-c", MANY_FILES)
    assert made.returncode == 0, made.stderr.decode()
    running = deployment.start(
        "exec", "--session", SESSION, "--", "sh", "-c", "echo started; exec sleep 300"
    )
    assert first_line(running) == b"started\n"
    return running


async def assert_nothing_left(
    deployment: Deployment, running: subprocess.Popen[bytes] | None
) -> None:
    """No rows, nothing on disk or in the daemon; a running command was told it was deleted."""
    store = await open_store(deployment.database_url, min_size=1, max_size=1)
    try:
        rows = (
            await store.get_session(SESSION),
            await store.get_binding(SESSION),
            await store.get_intent(SESSION),
        )
        lost = 0
        for record in await store.list_sessions():
            binding = await store.get_binding(record.session_id)
            lost += binding is not None and binding.lost
    finally:
        await store.aclose()
    assert rows == (None, None, None)
    leaked = deployment.remnants() + await deployment.containers()
    duplicated = max(0, len([r for r in leaked if r.startswith("mango-")]) - 1)
    assert (leaked, lost, duplicated) == ([], 0, 0)
    if running is not None:
        _, stderr = running.communicate(timeout=60)
        assert running.returncode == 130, stderr.decode()
        assert b"sandbox was deleted while it ran" in stderr


@pytest.mark.parametrize(("shape", "point"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
async def test_crashed_delete_is_finished_by_reconcile(
    deployment: Deployment, shape: str, point: FaultPoint
) -> None:
    """``mango sessions delete`` SIGKILLed at ``point``; ``mango reconcile`` removes everything."""
    running = None
    try:
        running = await prepare(deployment, shape)
        deployment.crash("sessions", "delete", SESSION, fault=point)
        reconciled = deployment.run("reconcile", "--json")
        assert reconciled.returncode == 0, reconciled.stderr.decode()
        report = json.loads(reconciled.stdout)
        settled = report["provisioning"]["completed"] + report["deletions"]["completed"]
        assert settled >= 1, report
        await assert_nothing_left(deployment, running)
    finally:
        if running is not None and running.poll() is None:
            running.kill()
            running.communicate()
        await deployment.remove_containers()


@pytest.mark.parametrize(("shape", "point"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
async def test_crashed_reconcile_is_finished_by_the_next(
    deployment: Deployment, shape: str, point: FaultPoint
) -> None:
    """A reconcile finishing a deletion is SIGKILLed at ``point``; the next one finishes it."""
    running = None
    try:
        running = await prepare(deployment, shape)
        deployment.crash("sessions", "delete", SESSION, fault=FaultPoint.AFTER_FENCE)
        deployment.crash("reconcile", fault=point)
        reconciled = deployment.run("reconcile", "--json")
        assert reconciled.returncode == 0, reconciled.stderr.decode()
        await assert_nothing_left(deployment, running)
        again = deployment.run("reconcile", "--json")
        assert json.loads(again.stdout)["deletions"]["attempted"] == 0
    finally:
        if running is not None and running.poll() is None:
            running.kill()
            running.communicate()
        await deployment.remove_containers()
