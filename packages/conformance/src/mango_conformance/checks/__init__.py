"""The checks of the suite, grouped by where they come from.

Each group is a mixin of test methods that use the ``conformance`` fixture (a
:class:`~mango_conformance.harness.Harness`); :class:`~mango_conformance.ProviderSuite`
combines them all. Markers are put on each test function, not on the mixin
classes, because pytest applies class markers along the whole MRO.
"""

from __future__ import annotations

import pytest

__all__ = ["assert_same_bytes", "mark_checks"]


def mark_checks(cls: type, mark: pytest.MarkDecorator) -> type:
    """Apply ``mark`` to every ``test_*`` function defined on ``cls`` itself; return ``cls``."""
    for name, member in list(vars(cls).items()):
        if name.startswith("test_") and callable(member):
            mark(member)
    return cls


def assert_same_bytes(actual: bytes, expected: bytes, what: str) -> None:
    """Fail with the first differing offset when ``actual != expected``.

    Output under test can be megabytes: pytest's own ``==`` report diffs the two
    values with difflib, which takes minutes on a large mismatch. This says
    where they part and shows a few bytes around it instead.
    """
    if actual == expected:
        return
    index = next(
        (i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b),
        min(len(actual), len(expected)),
    )
    window = slice(max(index - 16, 0), index + 16)
    raise AssertionError(
        f"{what}: {len(actual)} bytes, expected {len(expected)}; first difference at byte "
        f"{index}: got {actual[window]!r}, expected {expected[window]!r}"
    )
