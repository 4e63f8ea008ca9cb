"""``mango providers``: the installed sandbox providers, their capabilities and settings."""

from __future__ import annotations

import os
from typing import Any

import click

from mango.cli.common import load_settings
from mango.cli.output import echo_json, echo_table

__all__ = ["providers"]


@click.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (settings included).")
@click.option("-v", "--verbose", is_flag=True, help="Show every listed provider's settings too.")
def providers(names: tuple[str, ...], as_json: bool, verbose: bool) -> None:
    """List installed sandbox providers, their support level and capabilities.

    Settings (names, defaults, whether each is set; never a value) are shown
    for the providers NAMEd, or for every provider with -v.
    """
    settings = load_settings()
    from mango.domain.errors import InvalidInput
    from mango.plugins import load_plugins

    installed = load_plugins().providers()
    registry = [reg for reg in installed if not names or reg.name in names]
    unknown = sorted(set(names) - {reg.name for reg in registry})
    if unknown:
        listing = ", ".join(sorted(reg.name for reg in installed))
        raise InvalidInput(
            f"no provider {unknown[0]!r} is installed (installed: {listing})",
            hint="'mango providers' lists the installed providers",
        )
    rows: list[dict[str, Any]] = [
        {
            "name": reg.name,
            "selected": reg.name == settings.sandbox,
            "support_level": reg.support_level.value,
            "capabilities": list(reg.capabilities.names()),
            "description": reg.description,
            "quirks": sorted(quirk.value for quirk in reg.quirks),
            # Names, defaults and whether each is set; never a value (secrets stay in the env).
            "settings": [
                {
                    "env": spec.env,
                    "description": spec.description,
                    "default": None if spec.secret else spec.default,
                    "required": spec.required,
                    "secret": spec.secret,
                    "set": bool(os.environ.get(spec.env, "").strip()),
                }
                for spec in reg.settings
            ],
        }
        for reg in registry
    ]
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["", "name", "support", "capabilities"],
        [
            (
                "*" if row["selected"] else "",
                row["name"],
                row["support_level"],
                ", ".join(row["capabilities"]) or "-",
            )
            for row in rows
        ],
    )
    if not (names or verbose):
        click.echo("\nsettings: 'mango providers NAME' (or -v for every provider)")
        return
    for row in rows:
        if row["settings"]:
            click.echo(f"\n{row['name']} settings:")
        for spec in row["settings"]:
            notes = [
                word
                for word, on in (
                    ("required", spec["required"]),
                    ("secret", spec["secret"]),
                    ("set", spec["set"]),
                )
                if on
            ]
            if spec["default"] is not None:
                notes.append(f"default {spec['default']}")
            suffix = f" ({', '.join(notes)})" if notes else ""
            click.echo(f"  {spec['env']}{suffix}: {spec['description']}")
