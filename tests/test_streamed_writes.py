"""``mango files write`` against each remote vendor's fake: streamed, bounded, byte-exact.

Each fake runs as its own process (``python -m mango_provider_<name>.fake``,
the settings it prints point mango at it), so the memory measured is the
``mango`` command's alone: its peak RSS while 256 MiB are piped into it from
a generator must stay far below that. (That the fakes stream too is the
conformance suite's large-write check, where a fake serves in the test's own
process.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MANGO = str(Path(sys.executable).with_name("mango"))
MEBIBYTES = 256
GENERATOR = """
import hashlib, sys
out = sys.stdout.buffer
for index in range(int(sys.argv[1])):
    out.write(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
"""
"""Writes argv[1] MiB of deterministic bytes to stdout, one MiB at a time (never held whole)."""

FAKES = {
    # name: (argv after python, scratch directory appended; "export" lines after the URL)
    "e2b": (("-m", "mango_provider_e2b.fake", "--scratch"), 4),
    "cube": (("-m", "mango_provider_e2b.fake", "--cube", "--scratch"), 8),
    "opensandbox": (("-m", "mango_provider_opensandbox.fake", "--scratch"), 3),
    "daytona": (("-m", "mango_provider_daytona.fake"), 3),
}


def _expected_sha256() -> str:
    digest = hashlib.sha256()
    for index in range(MEBIBYTES):
        digest.update(hashlib.shake_128(index.to_bytes(8, "big")).digest(1 << 20))
    return digest.hexdigest()


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711, not pytest's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="mango-fwrite-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=sorted(FAKES))
def fake_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A vendor fake served by its own command, and the settings it printed for mango."""
    argv, exports = FAKES[request.param]
    process = subprocess.Popen(
        [sys.executable, *argv, str(tmp_path / "fake")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("http://127.0.0.1:")
        settings: dict[str, str] = {}
        for _ in range(exports):
            key, _, value = process.stdout.readline().strip().removeprefix("export ").partition("=")
            settings[key] = value
        assert settings["MANGO_SANDBOX"] == request.param
        yield settings
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _environ(state_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "E2B_", "CUBE_"))}
    env.update(
        MANGO_STATE_DIR=str(state_dir),
        # Stop the embedded PostgreSQL with each command: the directory is removed afterwards.
        MANGO_EMBEDDED_IDLE_SECONDS="0",
        **settings,
    )
    return env


def _mango(
    env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [MANGO, *args], input=stdin, capture_output=True, env=env, timeout=300, check=False
    )


def test_files_write_streams_into_each_remote_fake(
    fake_env: dict[str, str], state_dir: Path
) -> None:
    """256 MiB piped into 'files write' arrive exactly; mango's RSS grows far less than that."""
    env = _environ(state_dir, fake_env)
    made = _mango(env, "files", "write", "--session", "fw", "w/big.bin", stdin=b"old")
    assert made.returncode == 0, made.stderr.decode()
    # A child's ru_maxrss can start at its parent's: measure against a bare python.
    baseline = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, bare = os.wait4(baseline.pid, 0)
    baseline.returncode = 0
    generator = subprocess.Popen(
        [sys.executable, "-c", GENERATOR, str(MEBIBYTES)], stdout=subprocess.PIPE
    )
    assert generator.stdout is not None
    process = subprocess.Popen(
        [MANGO, "files", "write", "--session", "fw", "w/big.bin"],
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
    assert process.returncode == 0, stderr
    grown = (usage.ru_maxrss - bare.ru_maxrss) * 1024
    assert grown < (MEBIBYTES << 20) // 4, (
        f"peak RSS {usage.ru_maxrss} KiB, bare {bare.ru_maxrss} KiB, for {MEBIBYTES} MiB"
    )
    summed = _mango(
        env, "exec", "--session", "fw", "--", "sh", "-c", "sha256sum w/big.bin; ls -A w"
    )
    assert summed.returncode == 0, summed.stderr.decode()
    digest, listing = summed.stdout.decode().split("\n", 1)
    assert digest.split()[0] == _expected_sha256()
    assert listing.split() == ["big.bin"], "the write's temporary was left behind"
    deleted = _mango(env, "sessions", "delete", "fw")
    assert deleted.returncode == 0, deleted.stderr.decode()
