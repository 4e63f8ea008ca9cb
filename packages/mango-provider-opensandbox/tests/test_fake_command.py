"""The fake OpenSandbox served alone: ``python -m mango_provider_opensandbox.fake``."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx

from mango_provider_opensandbox.fake import DEFAULT_FAKE_API_KEY


def test_the_fake_prints_its_url_and_settings_and_stops_on_sigterm() -> None:
    """URL first, then the exports that point mango at it; the API answers with the key."""
    argv = [sys.executable, "-m", "mango_provider_opensandbox.fake"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            settings = [process.stdout.readline().strip() for _ in range(3)]
            assert settings == [
                "export MANGO_SANDBOX=opensandbox",
                f"export OPEN_SANDBOX_DOMAIN={url}",
                f"export OPEN_SANDBOX_API_KEY={DEFAULT_FAKE_API_KEY}",
            ]
            headers = {"OPEN-SANDBOX-API-KEY": DEFAULT_FAKE_API_KEY}
            listed = httpx.get(f"{url}/v1/sandboxes", headers=headers)
            assert listed.status_code == 200
            assert listed.json()["items"] == []
            assert httpx.get(f"{url}/v1/sandboxes").status_code == 401
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_without_aiohttp_it_names_the_extra_to_install() -> None:
    """An install without the fake extra gets the install command, not a traceback."""
    blocked = (
        "import runpy, sys; sys.modules['aiohttp'] = None; "
        "runpy.run_module('mango_provider_opensandbox.fake', run_name='__main__')"
    )
    completed = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert "pip install 'mango-provider-opensandbox[fake]'" in completed.stderr
