"""``MANGO_SANDBOX=docker mango exec``: the installed plugin behind the real command line."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango.provider.ownership import Ownership
from mango_provider_docker import Engine

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.slow]

MANGO = Path(sys.executable).with_name("mango")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711, not pytest's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="mango-docker-cli-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


NAMESPACE = "cli-test"


def _environ(
    state_dir: Path, resources: Path, image: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = {
        **os.environ,
        "MANGO_STATE_DIR": str(state_dir),
        "MANGO_SANDBOX": "docker",
        "MANGO_SANDBOX_IMAGE": image,
        "MANGO_SANDBOX_RESOURCE_DIR": str(resources),
        "MANGO_SANDBOX_PULL": "0",
        "MANGO_NAMESPACE": NAMESPACE,
        # Stop the embedded PostgreSQL with each command: the directory is removed afterwards.
        "MANGO_EMBEDDED_IDLE_SECONDS": "0",
        **(extra or {}),
    }
    env.pop("MANGO_DATABASE_URL", None)
    env.pop("MANGO_TEMPORAL_ADDRESS", None)
    return env


def _mango(
    state_dir: Path,
    resources: Path,
    image: str,
    *args: str,
    stdin: bytes = b"",
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(MANGO), *args],
        input=stdin,
        capture_output=True,
        env=_environ(state_dir, resources, image, extra),
        timeout=180,
        check=False,
    )


async def test_mango_exec_runs_in_a_docker_sandbox(
    docker_engine: Engine, test_image: str, state_dir: Path, tmp_path: Path
) -> None:
    """exec, files (read, mv, ls) and sessions delete work end to end with MANGO_SANDBOX=docker."""
    session = f"cli-{tmp_path.name}"
    resources = tmp_path / "resources"
    name = Ownership("docker", NAMESPACE).name(session)
    try:
        first = _mango(
            state_dir,
            resources,
            test_image,
            "exec",
            "--session",
            session,
            "--",
            "sh",
            "-c",
            "echo hello > note.txt; echo hi",
        )
        assert first.returncode == 0, first.stderr.decode()
        assert first.stdout == b"hi\n"
        inspect = await docker_engine.inspect_container(name)
        assert inspect is not None
        assert inspect["State"]["Running"]
        again = _mango(
            state_dir, resources, test_image, "exec", "--session", session, "--", "cat", "note.txt"
        )
        assert (again.returncode, again.stdout) == (0, b"hello\n")
        failing = _mango(
            state_dir,
            resources,
            test_image,
            "exec",
            "--session",
            session,
            "--",
            "sh",
            "-c",
            "exit 3",
        )
        assert failing.returncode == 3
        read = _mango(
            state_dir, resources, test_image, "files", "read", "--session", session, "note.txt"
        )
        assert read.stdout == b"hello\n"
        moved = _mango(
            state_dir, resources, test_image, "files", "mv", "--session", session, "note.txt", "n2"
        )
        assert moved.returncode == 0, moved.stderr.decode()
        listed = _mango(
            state_dir, resources, test_image, "files", "ls", "--session", session, "--json"
        )
        entries = json.loads(listed.stdout)["entries"]
        # skills/ is the read-only skills mount point every container has in its workspace.
        assert [(e["path"], e["kind"]) for e in entries] == [
            ("n2", "file"),
            ("skills", "directory"),
        ]
        assert entries[0]["size"] == 6
        deleted = _mango(state_dir, resources, test_image, "sessions", "delete", session)
        assert deleted.returncode == 0, deleted.stderr.decode()
        assert await docker_engine.inspect_container(name) is None
    finally:
        leftover = await docker_engine.inspect_container(name)
        if leftover is not None:
            await docker_engine.remove_container(str(leftover["Id"]))


def test_doctor_reports_an_unreachable_docker_daemon(state_dir: Path, tmp_path: Path) -> None:
    """With DOCKER_HOST pointing nowhere, doctor's provider check fails (a real round trip)."""
    result = _mango(
        state_dir,
        tmp_path / "resources",
        "unused:latest",
        "doctor",
        "--json",
        extra={"DOCKER_HOST": "unix:///nonexistent"},
    )
    assert result.returncode == 2
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["database"]["ok"] is True
    assert checks["provider docker"]["ok"] is False
    assert "unreachable" in checks["provider docker"]["detail"]


def test_doctor_reports_a_reachable_docker_daemon(
    docker_engine: Engine, state_dir: Path, tmp_path: Path
) -> None:
    """With the daemon up, doctor's provider check names the Engine it reached."""
    result = _mango(state_dir, tmp_path / "resources", "unused:latest", "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["provider docker"]["ok"] is True, checks["provider docker"]
    assert "Docker Engine" in checks["provider docker"]["detail"]
    assert f"namespace {NAMESPACE}" in checks["provider docker"]["detail"]


async def test_missing_program_and_sigterm_read_like_local(
    docker_engine: Engine, test_image: str, state_dir: Path, tmp_path: Path
) -> None:
    """A missing program reads as on local; SIGTERM kills the tree inside the container."""
    session = f"cli-term-{tmp_path.name}"
    resources = tmp_path / "resources"
    name = Ownership("docker", NAMESPACE).name(session)
    try:
        missing = _mango(state_dir, resources, test_image, "exec", "--session", session, "nosuch")
        assert (missing.returncode, missing.stdout, missing.stderr) == (
            127,
            b"",
            b"mango: nosuch: command not found\n",
        )
        script = "sleep 301 & sleep 302 & printf ready; wait"
        env = _environ(state_dir, resources, test_image)
        for signum, expected in (
            (signal.SIGTERM, (143, b"error: terminated\n")),
            (signal.SIGHUP, (129, b"error: hung up\n")),  # the terminal closed
        ):
            code, err = _terminate_when_ready(
                env, signum, "exec", "--session", session, "--", "sh", "-c", script
            )
            assert (code, err) == expected, signum
            # Right after mango exited: nothing of the command runs in the container any more.
            listing = _mango(
                state_dir, resources, test_image, "exec", "--session", session, "ps", "-o", "args"
            )
            assert listing.returncode == 0, listing.stderr
            assert b"sleep 30" not in listing.stdout, signum
    finally:
        leftover = await docker_engine.inspect_container(name)
        if leftover is not None:
            await docker_engine.remove_container(str(leftover["Id"]))


def _terminate_when_ready(
    env: dict[str, str], signum: signal.Signals, *args: str
) -> tuple[int, bytes]:
    """Run ``mango ARGS``; once it printed ``ready``, send it ``signum``. Its exit and stderr."""
    with subprocess.Popen(
        [str(MANGO), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready
            assert os.read(process.stdout.fileno(), 5) == b"ready"
            process.send_signal(signum)
            _, err = process.communicate(timeout=120)
        finally:
            process.kill()
    return process.returncode, err


def test_a_pull_that_cannot_reach_a_registry_says_so(
    docker_engine: Engine, state_dir: Path, tmp_path: Path
) -> None:
    """An image whose registry does not answer: exit 2, the reason, and what to do offline."""
    result = _mango(
        state_dir,
        tmp_path / "resources",
        "127.0.0.1:1/mango-test/absent:latest",  # a registry address where nothing listens
        "exec",
        "--session",
        f"cli-pull-{tmp_path.name}",
        "true",
        extra={"MANGO_SANDBOX_PULL": "1"},
    )
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, lines
    error = next(line for line in lines if line.startswith("error: "))
    assert "cannot pull image '127.0.0.1:1/mango-test/absent:latest'" in error
    assert "could not reach the image's registry" in error
    assert lines[-1].startswith("hint: check the Docker Engine's network and proxy settings")
    assert "MANGO_SANDBOX_PULL=0" in lines[-1]


def test_delete_with_the_wrong_provider_selected_changes_nothing(
    state_dir: Path, tmp_path: Path
) -> None:
    """A local Session deleted with MANGO_SANDBOX=docker: exit 2, named owner, still bound."""
    resources = tmp_path / "resources"
    local = {"MANGO_SANDBOX": "local"}
    made = _mango(
        state_dir, resources, "unused:latest", "exec", "--session", "mine", "true", extra=local
    )
    assert made.returncode == 0, made.stderr
    refused = _mango(state_dir, resources, "unused:latest", "sessions", "delete", "mine")
    assert refused.returncode == 2
    error, hint = refused.stderr.decode().splitlines()
    assert error == (
        "error: session 'mine' belongs to provider 'local', not to 'docker' "
        "(the provider selected here)"
    )
    assert hint == (
        "hint: delete it with MANGO_SANDBOX=local (on the durable path: in a worker of that "
        "provider)"
    )
    listed = _mango(state_dir, resources, "unused:latest", "sessions", "list", "--json")
    assert [(row["session_id"], row["state"]) for row in json.loads(listed.stdout)] == [
        ("mine", "bound")
    ]
    deleted = _mango(
        state_dir, resources, "unused:latest", "sessions", "delete", "mine", extra=local
    )
    assert deleted.returncode == 0, deleted.stderr


def test_a_failed_first_use_says_how_to_free_the_id(
    docker_engine: Engine, state_dir: Path, tmp_path: Path
) -> None:
    """A first exec that failed on Docker (image missing): local is told how to free the id."""
    del docker_engine  # the failure must come from a missing image, not from a missing Engine
    resources = tmp_path / "resources"
    local = {"MANGO_SANDBOX": "local"}
    failed = _mango(
        state_dir, resources, "mango-test/absent:latest", "exec", "--session", "x", "true"
    )
    assert failed.returncode == 2, failed.stderr
    refused = _mango(
        state_dir, resources, "unused:latest", "exec", "--session", "x", "true", extra=local
    )
    assert refused.returncode == 2
    error, hint = refused.stderr.decode().splitlines()
    assert error == (
        "error: session 'x' is being provisioned by provider 'docker' (its first use there has "
        "not finished: it failed or is still running), not by 'local' (the provider selected "
        "here)"
    )
    assert hint == (
        "hint: finish it by retrying with MANGO_SANDBOX=docker, or free the id with "
        "'MANGO_SANDBOX=docker mango sessions delete x' (on the durable path: in a worker of "
        "that provider)"
    )
    freed = _mango(state_dir, resources, "unused:latest", "sessions", "delete", "x")
    assert freed.returncode == 0, freed.stderr
    again = _mango(
        state_dir, resources, "unused:latest", "exec", "--session", "x", "true", extra=local
    )
    assert again.returncode == 0, again.stderr


async def test_sessions_pause_list_ports_and_delete_of_a_paused_session(
    docker_engine: Engine, test_image: str, state_dir: Path, tmp_path: Path
) -> None:
    """ports expose prints the 127.0.0.1 URL; pause shows in sessions list; a paused one deletes."""
    session = f"pause-{tmp_path.name}"
    resources = tmp_path / "resources"
    name = Ownership("docker", NAMESPACE).name(session)
    ports = {"MANGO_SANDBOX_PORTS": "8080"}

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return _mango(state_dir, resources, test_image, *args, extra=ports)

    # A Session without a sandbox yet: pausing it is a wrong moment, not a fault of mango's.
    fresh = f"{session}-new"
    assert run("sessions", "create", fresh).returncode == 0
    early = run("sessions", "pause", fresh)
    assert early.returncode == 2, early.stderr.decode()
    assert early.stderr.decode().splitlines() == [
        "error: cannot pause a Session in state 'unbound'",
        (
            "hint: only a Session with a sandbox (state 'bound' or 'paused') can be paused; "
            "'mango sessions list' shows its state, and 'mango exec' gives a new one its sandbox"
        ),
    ]
    try:
        made = run("exec", "--session", session, "--network", "bridge", "--", "true")
        assert made.returncode == 0, made.stderr.decode()
        exposed = run("ports", "expose", "--session", session, "--network", "bridge", "8080")
        assert exposed.returncode == 0, exposed.stderr.decode()
        inspect = await docker_engine.inspect_container(name)
        assert inspect is not None
        host_port = inspect["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
        assert exposed.stdout.decode() == f"http://127.0.0.1:{host_port}\n"
        paused = run("sessions", "pause", session)
        assert (paused.returncode, paused.stdout) == (0, f"{session}: paused\n".encode())
        inspect = await docker_engine.inspect_container(name)
        assert inspect is not None
        assert inspect["State"]["Paused"] is True
        listed = run("sessions", "list", "--json")
        states = {row["session_id"]: row for row in json.loads(listed.stdout)}
        assert states[fresh]["state"] == "unbound"
        row = states[session]
        assert row["state"] == "paused"
        assert row["paused_at"] is not None
        deleted = run("sessions", "delete", session)
        assert deleted.returncode == 0, deleted.stderr.decode()
        assert await docker_engine.inspect_container(name) is None
    finally:
        leftover = await docker_engine.inspect_container(name)
        if leftover is not None:
            await docker_engine.remove_container(str(leftover["Id"]))


GENERATOR = """
import hashlib, sys
out = sys.stdout.buffer
for index in range(int(sys.argv[1])):
    out.write(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
"""
"""Writes argv[1] MiB of deterministic bytes to stdout, one MiB at a time (never held whole)."""


def _streamed_write(
    env: dict[str, str], session: str, path: str, mebibytes: int
) -> tuple[int, str, int]:
    """Pipe the generator into 'mango files write': its exit code, stderr and RSS growth."""
    # A child's ru_maxrss can start at its parent's: measure against a bare python.
    baseline = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, bare = os.wait4(baseline.pid, 0)
    baseline.returncode = 0
    generator = subprocess.Popen(
        [sys.executable, "-c", GENERATOR, str(mebibytes)], stdout=subprocess.PIPE
    )
    assert generator.stdout is not None
    process = subprocess.Popen(
        [str(MANGO), "files", "write", "--session", session, path],
        stdin=generator.stdout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    generator.stdout.close()  # mango holds the pipe's only read end
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert generator.wait(timeout=60) == 0
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    process.stderr.close()
    return process.returncode, stderr, (usage.ru_maxrss - bare.ru_maxrss) * 1024


def test_mango_files_write_streams_into_a_container(
    test_image: str, state_dir: Path, tmp_path: Path
) -> None:
    """256 MiB piped into 'files write' arrive exactly; mango's RSS grows far less than that."""
    session = f"cli-w-{tmp_path.name}"
    resources = tmp_path / "resources"
    mebibytes = 256
    expected = hashlib.sha256()
    for index in range(mebibytes):
        expected.update(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
    try:
        made = _mango(
            state_dir, resources, test_image, "files", "write", "--session", session, "w/big.bin"
        )
        assert made.returncode == 0, made.stderr.decode()
        env = _environ(state_dir, resources, test_image)
        code, stderr, grown = _streamed_write(env, session, "w/big.bin", mebibytes)
        assert code == 0, stderr
        assert grown < (mebibytes << 20) // 4, f"peak RSS grew by {grown} bytes"
        summed = _mango(
            state_dir,
            resources,
            test_image,
            "exec",
            "--session",
            session,
            "--",
            "sh",
            "-c",
            "sha256sum w/big.bin; ls -A w",
        )
        assert summed.returncode == 0, summed.stderr.decode()
        digest, listing = summed.stdout.decode().split("\n", 1)
        assert digest.split()[0] == expected.hexdigest()
        assert listing.split() == ["big.bin"], "the write's temporary was left behind"
    finally:
        _mango(state_dir, resources, test_image, "sessions", "delete", session)
