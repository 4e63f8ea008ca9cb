"""``mango-conformance``: run the suite against an installed provider's offline target.

::

    mango-conformance list
    mango-conformance run NAME [--profile PROFILE] [--strict] [PYTEST ARGS...]

``run`` looks ``NAME`` up among the conformance targets that installed
plugins register (``mango_register_conformance_targets``) and runs pytest on
a module of this package whose suite class uses that target. Extra arguments
go to pytest (``-k l02``, ``-x``, ``--mango-max-examples 20``, ...). The exit
status is pytest's; an unknown name prints one line listing the available
targets and exits 2.

Before the suite runs, the target is opened once: a target that cannot open
(an optional dependency not installed, a test image missing, no daemon) is a
*setup problem*, printed as one line with what to install or do, exit 2,
instead of every check failing and the verdict "NOT conformant".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mango.plugins import load_plugins
from mango.provider import ConformanceTarget, ConformanceTargetRegistry, MangoError
from mango_conformance.profiles import PROFILES

__all__ = ["USAGE_ERROR", "build_parser", "main"]

USAGE_ERROR = 2
"""Exit status for an unknown target, a broken plugin or bad arguments."""

_TARGET_ENV = "MANGO_CONFORMANCE_TARGET"
_RUN_MODULE = Path(__file__).with_name("_run_target.py")
_INI = """\
[pytest]
addopts = -p no:cacheprovider
asyncio_default_fixture_loop_scope = function
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mango-conformance``."""
    parser = argparse.ArgumentParser(
        prog="mango-conformance",
        description="Run the mango provider conformance suite against an installed plugin.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="list the offline conformance targets of installed plugins")
    run = commands.add_parser(
        "run",
        help="run the whole suite against one target (extra arguments go to pytest)",
    )
    run.add_argument("name", help="the provider name of an installed offline target")
    run.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=None,
        help="cost profile (default: $MANGO_CONFORMANCE_PROFILE or offline-dev)",
    )
    run.add_argument(
        "--strict", action="store_true", help="fail on leaked sandboxes and stale waivers"
    )
    return parser


_INSTALL = {
    "aiohttp": "mango-core[fake]",
    "httpx": "mango-core[remote]",
    "stamina": "mango-core[remote]",
}
"""The install command of the optional packages mango's targets need, by module."""


def setup_problem(target: ConformanceTarget) -> str | None:
    """Open ``target`` once in a throw-away directory; what stops it, or ``None``."""

    async def enter() -> None:
        with tempfile.TemporaryDirectory(prefix="mango-conformance-setup-") as scratch:
            async with target.open(Path(scratch)):
                return

    try:
        asyncio.run(enter())
    except ModuleNotFoundError as exc:
        module = (exc.name or "").split(".")[0] or "?"
        install = _INSTALL.get(module, module)
        return (
            f"setup problem: the {target.provider} target needs the Python package "
            f"{module!r}, which is not installed: pip install '{install}'"
        )
    except MangoError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        return f"setup problem: the {target.provider} target cannot open: {exc}{hint}"
    return None


def _error(message: str) -> int:
    print(f"mango-conformance: {message}", file=sys.stderr)
    return USAGE_ERROR


def _targets() -> ConformanceTargetRegistry:
    return load_plugins().conformance_targets()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    try:
        targets = _targets()
    except MangoError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        return _error(f"{exc}{hint}")
    if args.command == "list":
        if extra:
            return _error(f"unexpected arguments: {' '.join(extra)}")
        for name in targets.names():
            description = targets.get(name).description
            print(f"{name}\t{description}" if description else name)
        return 0
    if args.name not in targets.names():
        available = ", ".join(targets.names()) or "none"
        return _error(f"no offline conformance target named {args.name!r} (available: {available})")
    problem = setup_problem(targets.get(args.name))
    if problem is not None:
        return _error(problem)
    return _run(args.name, profile=args.profile, strict=args.strict, extra=extra)


def _run(name: str, *, profile: str | None, strict: bool, extra: Sequence[str]) -> int:
    # A child interpreter: pytest must import (and assertion-rewrite) the suite itself.
    options = ["--mango-hypothesis-db", str(Path.cwd() / ".hypothesis" / "conformance")]
    if profile:
        options += ["--mango-profile", profile]
    if strict:
        options.append("--mango-strict")
    with tempfile.TemporaryDirectory(prefix="mango-conformance-") as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text(_INI, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ini),
            "--rootdir",
            str(_RUN_MODULE.parent.parent),
            "--import-mode=importlib",
            "-p",
            "mango_conformance",
            *options,
            *extra,
            str(_RUN_MODULE),
        ]
        completed = subprocess.run(command, env={**os.environ, _TARGET_ENV: name}, check=False)
        return completed.returncode
