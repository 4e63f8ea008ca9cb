"""The checks of the suite, grouped by where they come from.

Each group is a mixin of test methods that use the ``conformance`` fixture (a
:class:`~mango_conformance.harness.Harness`); :class:`~mango_conformance.ProviderSuite`
combines them all. Markers are put on each test function, not on the mixin
classes, because pytest applies class markers along the whole MRO.
"""

from __future__ import annotations

import pytest

__all__ = ["mark_checks"]


def mark_checks(cls: type, mark: pytest.MarkDecorator) -> type:
    """Apply ``mark`` to every ``test_*`` function defined on ``cls`` itself; return ``cls``."""
    for name, member in list(vars(cls).items()):
        if name.startswith("test_") and callable(member):
            mark(member)
    return cls
