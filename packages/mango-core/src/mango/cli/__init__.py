"""The ``mango`` command line.

:func:`main` (the script's entry point) imports the commands itself, so
Ctrl-C while they load (most of a command's first second) is
``error: interrupted`` and exit 130, not a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango.runtime import PortsWrapper

__all__ = ["cli", "main"]

_EXIT_INTERRUPTED = 130  # mango.cli.common.EXIT_INTERRUPTED, which is not loaded yet


def main(*, wrap_ports: PortsWrapper | None = None) -> None:
    """Entry point of the ``mango`` script: :func:`mango.cli.main.main` once it is loaded."""
    try:
        from mango.cli.main import main as run
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(_EXIT_INTERRUPTED) from None
    _keep_entry_point()
    run(wrap_ports=wrap_ports)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from mango.cli.main import cli

        _keep_entry_point()
        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_ENTRY_POINT = main


def _keep_entry_point() -> None:
    # Importing the module ``mango.cli.main`` binds this package's ``main`` to it: put ours back.
    globals()["main"] = _ENTRY_POINT
