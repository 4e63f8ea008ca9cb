"""``python -m mango_provider_e2b.fake [--cube] [--port N] [--api-key KEY]``: run the fake.

Prints the URL on the first line, then the settings that point mango at it,
and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence

from mango.fakes import serve
from mango_provider_e2b.fake.service import (
    CUBE_MODE,
    E2B_MODE,
    E2BFakeService,
    FakeConfig,
    mango_settings,
)


class _Announce:
    """Writes the URL line, then how to point mango at it."""

    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.url: str | None = None

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        if text.strip().startswith("http://"):
            self.url = text.strip()
        if "\n" in text and self.url is not None:
            url, self.url = self.url, None
            settings = mango_settings(url, self.config)
            sys.stdout.write("".join(f"export {k}={v}\n" for k, v in settings.items()))
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


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
    with tempfile.TemporaryDirectory(prefix="mango-e2b-fake-") as default_scratch:
        service = E2BFakeService.create(
            args.scratch or default_scratch, config, name=f"{mode}-fake", port=args.port
        )
        asyncio.run(serve(service, out=_Announce(config)))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
