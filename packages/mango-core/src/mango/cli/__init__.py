"""The ``mango`` command line."""

from mango.cli.main import cli, main

__all__ = ["cli", "main"]
