"""``python -m mango_provider_e2b.fake [--cube] [--port N] [--api-key KEY]``: run the fake.

Prints the URL on the first line, then the settings that point mango at it,
and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mango.fakes import run_standalone
from mango_provider_e2b.fake.config import CUBE_MODE, E2B_MODE, FakeConfig, mango_settings
from mango_provider_e2b.fake.service import E2BFakeService


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake until interrupted; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m mango_provider_e2b.fake")
    parser.add_argument(
        "--cube", action="store_true", help="CubeSandbox mode (Bearer auth, Host routing)"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)"
    )
    parser.add_argument("--api-key", default="e2b_fake_key", help="the key the fake accepts")
    parser.add_argument("--scratch", help="directory for the sandboxes (default: a temporary one)")
    args = parser.parse_args(argv)
    mode = CUBE_MODE if args.cube else E2B_MODE
    config = FakeConfig(
        mode=mode, api_key=args.api_key or None, domain="cube.local" if args.cube else "e2b.local"
    )

    def build(scratch: Path) -> E2BFakeService:
        return E2BFakeService.create(scratch, config, name=f"{mode}-fake", port=args.port)

    def announce(url: str) -> list[str]:
        # How to point mango at it, after the URL line.
        return [f"export {key}={value}" for key, value in mango_settings(url, config).items()]

    run_standalone(build, args.scratch, prefix="mango-e2b-fake-", announce=announce)
    return 0


if __name__ == "__main__":
    sys.exit(main())
