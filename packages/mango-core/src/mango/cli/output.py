"""Printing helpers: plain tables and JSON, nothing fancy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["echo_json", "echo_table"]


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows under headers, columns padded to their widest cell."""
    cells = [[str(h).upper() for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
