"""``mango ports expose`` on Daytona: the preview link on stdout, its token only when asked.

The real command line (embedded PostgreSQL in its own state directory)
against the standalone fake, as a user would run it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mango_provider_daytona.fake import FAKE_API_KEY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MANGO = Path(sys.executable).with_name("mango")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory the embedded PostgreSQL account can reach (0711, not pytest's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="mango-daytona-cli-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fake_url(tmp_path: Path) -> Iterator[str]:
    """The standalone fake Daytona's URL (stopped with SIGTERM afterwards)."""
    argv = [sys.executable, "-m", "mango_provider_daytona.fake", str(tmp_path / "fake")]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            yield process.stdout.readline().strip()
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _mango(state_dir: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "DAYTONA_"))},
        "MANGO_STATE_DIR": str(state_dir),
        "MANGO_SANDBOX": "daytona",
        "DAYTONA_API_URL": url,
        "DAYTONA_API_KEY": FAKE_API_KEY,
        # Stop the embedded PostgreSQL with each command: the directory is removed afterwards.
        "MANGO_EMBEDDED_IDLE_SECONDS": "0",
    }
    return subprocess.run(
        [str(MANGO), *args], capture_output=True, text=True, env=env, timeout=180, check=False
    )


def test_ports_expose_prints_the_link_and_the_token_only_when_asked(
    state_dir: Path, fake_url: str
) -> None:
    """stdout is the URL alone; stderr names the header; --show-headers prints its value."""
    made = _mango(state_dir, fake_url, "exec", "--session", "web", "--", "true")
    assert made.returncode == 0, made.stderr
    plain = _mango(state_dir, fake_url, "ports", "expose", "--session", "web", "8080")
    assert plain.returncode == 0, plain.stderr
    url = plain.stdout.strip()
    assert url.startswith(f"{fake_url}/preview/")
    assert url.endswith("/8080")
    assert "X-Daytona-Preview-Token" in plain.stderr
    shown = _mango(
        state_dir, fake_url, "ports", "expose", "--session", "web", "--show-headers", "8080"
    )
    assert shown.returncode == 0, shown.stderr
    first, header = shown.stdout.splitlines()
    name, _, token = header.partition(": ")
    assert (first, name) == (url, "X-Daytona-Preview-Token")
    assert len(token) >= 16
    assert token not in plain.stdout + plain.stderr
    refused = _mango(state_dir, fake_url, "ports", "expose", "--session", "nobody", "8080")
    assert refused.returncode == 2
    assert "has no sandbox" in refused.stderr
