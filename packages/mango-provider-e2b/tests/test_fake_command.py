"""``python -m mango_provider_e2b.fake``: the URL, then the settings, served until SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from mango_provider_e2b.fake import CUBE_MODE, E2B_MODE, FakeConfig, mango_settings


@pytest.mark.parametrize(
    ("flags", "config"),
    [
        ((), FakeConfig(mode=E2B_MODE)),
        (("--cube",), FakeConfig(mode=CUBE_MODE, domain="cube.local")),
    ],
    ids=["e2b", "cube"],
)
def test_the_fake_prints_its_url_and_settings_and_stops_on_sigterm(
    tmp_path: Path, flags: tuple[str, ...], config: FakeConfig
) -> None:
    """The first line is the URL, then one ``export`` per setting; SIGTERM ends it with 0."""
    argv = [sys.executable, "-m", "mango_provider_e2b.fake", *flags, "--scratch", str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            settings = mango_settings(url, config)
            exports = [process.stdout.readline().rstrip("\n") for _ in settings]
            assert exports == [f"export {key}={value}" for key, value in settings.items()]
            assert httpx.get(f"{url}/health").json() == {"status": "ok", "sandboxes": 0}
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
