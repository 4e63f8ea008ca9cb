"""``python -m mango_provider_opensandbox.fake [--port N] [--api-key KEY] [--scratch DIR]``.

Serves a fake OpenSandbox server on 127.0.0.1 until SIGTERM or SIGINT,
printing its URL on the first line and then the settings that point mango
at it. It needs aiohttp (``pip install 'mango-provider-opensandbox[fake]'``);
without it, it says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

INSTALL = "pip install 'mango-provider-opensandbox[fake]'"
"""What brings the fake's one extra dependency (aiohttp, through mango-core[fake])."""


def mango_settings(url: str, api_key: str | None) -> dict[str, str]:
    """The settings that point mango's ``opensandbox`` provider at a fake at ``url``."""
    settings = {"MANGO_SANDBOX": "opensandbox", "OPEN_SANDBOX_DOMAIN": url}
    if api_key:
        settings["OPEN_SANDBOX_API_KEY"] = api_key
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a fake OpenSandbox until interrupted; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mango_provider_opensandbox.fake",
        description="A fake OpenSandbox server (lifecycle API, server proxy, execd, egress "
        "sidecar) on 127.0.0.1 whose sandboxes run local processes: a test double, not an "
        "isolation boundary.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any)")
    parser.add_argument(
        "--api-key", default=None, help="the key the fake wants (default: fake-opensandbox-key)"
    )
    parser.add_argument("--scratch", help="directory for the sandboxes (default: a temporary one)")
    args = parser.parse_args(argv)
    try:
        from mango.fakes import run_standalone
        from mango_provider_opensandbox.fake.server import DEFAULT_FAKE_API_KEY, FakeOpenSandbox
    except ModuleNotFoundError as exc:
        print(
            f"mango: the fake OpenSandbox needs the Python package {exc.name!r}, which is not "
            f"installed: {INSTALL}",
            file=sys.stderr,
        )
        return 2
    api_key = args.api_key if args.api_key is not None else DEFAULT_FAKE_API_KEY

    def build(scratch: Path) -> FakeOpenSandbox:
        fake = FakeOpenSandbox(scratch, api_key=api_key or None)
        fake.service.port = args.port
        return fake

    def announce(url: str) -> list[str]:
        return [f"export {key}={value}" for key, value in mango_settings(url, api_key).items()]

    run_standalone(build, args.scratch, prefix="mango-opensandbox-fake-", announce=announce)
    return 0


if __name__ == "__main__":
    sys.exit(main())
