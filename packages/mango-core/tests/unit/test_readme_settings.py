"""Every setting the command line reads is documented in a README's configuration table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
_NAME = re.compile(r"""["'](MANGO_[A-Z0-9_]+|DOCKER_[A-Z0-9_]+)["']""")


def _read(source: Path) -> set[str]:
    """The environment variable names a source tree spells out."""
    return {
        match
        for path in source.rglob("*.py")
        for match in _NAME.findall(path.read_text(encoding="utf-8"))
        if not match.endswith("_ENV")  # the name of a constant in __all__, not a variable
    }


def _documented(readme: Path) -> set[str]:
    """Names that start a row of a table (or are listed in one) in ``readme``."""
    text = readme.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return {name for row in rows for name in re.findall(r"`((?:MANGO|DOCKER)_[A-Z0-9_]+)`", row)}


@pytest.mark.parametrize(
    ("source", "readme"),
    [
        ("packages/mango-core/src", "README.md"),
        ("packages/mango-provider-docker/src", "packages/mango-provider-docker/README.md"),
    ],
)
def test_every_setting_is_in_the_readme_table(source: str, readme: str) -> None:
    """A variable read by the code but in no README table (its own or the root's) fails here."""
    read = _read(ROOT / source)
    assert read, f"no settings found under {source}"
    missing = sorted(read - _documented(ROOT / readme) - _documented(ROOT / "README.md"))
    assert missing == [], f"{readme} does not document {missing}"
