"""``python -m mango.fakes MODULE:ROUTES [--scratch DIR] [--port N]``.

Imports the routes factory ``ROUTES`` from ``MODULE``, serves it on
127.0.0.1, prints the URL on the first line and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from mango.fakes.service import FakeService, RoutesFactory, run_standalone


def _load(spec: str) -> RoutesFactory:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"expected MODULE:ROUTES, got {spec!r}")
    factory: RoutesFactory = getattr(importlib.import_module(module_name), attribute)
    return factory


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake named on the command line; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m mango.fakes")
    parser.add_argument("routes", help="MODULE:ROUTES, a routes factory taking the service")
    parser.add_argument("--scratch", help="directory for the sandboxes (default: a temp dir)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any)")
    parser.add_argument("--name", default="fake", help="name used in messages")
    args = parser.parse_args(argv)
    routes = _load(args.routes)

    def build(scratch: Path) -> FakeService:
        return FakeService(scratch, routes, name=args.name, port=args.port)

    run_standalone(build, args.scratch, prefix="mango-fake-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
