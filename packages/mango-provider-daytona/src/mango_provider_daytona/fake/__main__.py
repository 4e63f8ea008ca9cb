"""``python -m mango_provider_daytona.fake [SCRATCH] [--port N] [--api-key KEY]``: run the fake.

Prints its URL on the first line, then the settings that point mango at it
(``export MANGO_SANDBOX=daytona`` ...), and serves until SIGTERM or SIGINT.
The key is :data:`~mango_provider_daytona.fake.FAKE_API_KEY` unless given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mango.fakes import FakeService, run_standalone
from mango_provider_daytona.fake.server import DaytonaFake
from mango_provider_daytona.fake.state import FAKE_API_KEY, FAKE_MAX_OUTPUT_BYTES


def mango_settings(url: str, api_key: str) -> dict[str, str]:
    """The settings that point mango's ``daytona`` provider at a fake at ``url``."""
    return {"MANGO_SANDBOX": "daytona", "DAYTONA_API_URL": url, "DAYTONA_API_KEY": api_key}


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a fake Daytona until interrupted; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mango_provider_daytona.fake",
        description="A fake Daytona (API and toolbox) on 127.0.0.1 whose sandboxes run local "
        "processes: a test double, not an isolation boundary.",
    )
    parser.add_argument(
        "scratch", nargs="?", help="directory for the sandboxes (default: a temporary one)"
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any)")
    parser.add_argument("--api-key", default=FAKE_API_KEY, help="the key the fake accepts")
    args = parser.parse_args(argv)

    def build(scratch: Path) -> FakeService:
        fake = DaytonaFake(api_key=args.api_key)
        return FakeService(
            scratch,
            fake.routes,
            name="daytona",
            port=args.port,
            max_output_bytes=FAKE_MAX_OUTPUT_BYTES,
        )

    def announce(url: str) -> list[str]:
        return [f"export {key}={value}" for key, value in mango_settings(url, args.api_key).items()]

    run_standalone(build, args.scratch, prefix="mango-daytona-fake-", announce=announce)
    return 0


if __name__ == "__main__":
    sys.exit(main())
