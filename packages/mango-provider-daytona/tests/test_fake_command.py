"""The fake Daytona served alone: its module entry, and the scaffold's entry with its routes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from mango_provider_daytona.fake import FAKE_API_KEY


@pytest.mark.parametrize(
    "entry",
    [
        ("-m", "mango_provider_daytona.fake"),
        ("-m", "mango.fakes", "mango_provider_daytona.fake:routes", "--scratch"),
    ],
    ids=["module", "scaffold"],
)
def test_the_standalone_fake_serves_until_sigterm(tmp_path: Path, entry: tuple[str, ...]) -> None:
    """It prints its URL, answers the API with FAKE_API_KEY (401 without), and SIGTERM ends it."""
    argv = [sys.executable, *entry, str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            if entry[1] == "mango_provider_daytona.fake":
                settings = [process.stdout.readline().strip() for _ in range(3)]
                assert settings == [
                    "export MANGO_SANDBOX=daytona",
                    f"export DAYTONA_API_URL={url}",
                    f"export DAYTONA_API_KEY={FAKE_API_KEY}",
                ]
            headers = {"Authorization": f"Bearer {FAKE_API_KEY}"}
            listed = httpx.get(f"{url}/sandbox", headers=headers)
            assert (listed.status_code, listed.json()["items"]) == (200, [])
            assert httpx.get(f"{url}/sandbox").status_code == 401
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_help_prints_usage_and_serves_nothing() -> None:
    """``--help`` is help, not a scratch directory to serve from."""
    completed = subprocess.run(
        [sys.executable, "-m", "mango_provider_daytona.fake", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0
    assert completed.stdout.startswith("usage: python -m mango_provider_daytona.fake")
    assert "--api-key" in completed.stdout
