"""The provider surface (``mango.provider.__all__``) changes only on purpose.

Every backend distribution imports this surface and nothing deeper, so a name
that appears or disappears is a change for provider authors. The committed
list ``provider_surface.txt`` beside this file is the snapshot.
"""

from __future__ import annotations

from pathlib import Path

import mango.provider

SNAPSHOT = Path(__file__).with_name("provider_surface.txt")
UPDATE = (
    "uv run python -c \"import mango.provider; print(*mango.provider.__all__, sep='\\n')\""
    f" > {SNAPSHOT.relative_to(Path(__file__).parents[4]).as_posix()}"
)


def test_provider_surface_matches_the_snapshot() -> None:
    """``mango.provider.__all__`` equals the committed list, name for name and in order."""
    committed = SNAPSHOT.read_text(encoding="utf-8").split()
    live = list(mango.provider.__all__)
    added = sorted(set(live) - set(committed))
    removed = sorted(set(committed) - set(live))
    assert live == committed, (
        "mango.provider.__all__ differs from the committed snapshot "
        f"(added: {', '.join(added) or 'none'}; removed: {', '.join(removed) or 'none'}). "
        "The provider surface is what every provider distribution imports: if the change "
        f"is deliberate, regenerate the snapshot with\n    {UPDATE}\nand record the change "
        "for provider authors in packages/mango-core/CHANGELOG.md."
    )
