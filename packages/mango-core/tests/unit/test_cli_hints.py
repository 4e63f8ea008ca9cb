"""The command line's hint for each kind of failure (the README promises one under every error)."""

from __future__ import annotations

import pytest

from mango.cli import hints
from mango.domain import errors


def _tree() -> list[type[errors.MangoError]]:
    found = [getattr(errors, name) for name in errors.__all__]
    return [cls for cls in found if isinstance(cls, type) and issubclass(cls, errors.MangoError)]


def _bare(cls: type[errors.MangoError]) -> errors.MangoError:
    """An instance with no hint of its own, built without running its constructor's checks."""
    exc = cls.__new__(cls)
    errors.MangoError.__init__(exc, "something failed")
    return exc


@pytest.mark.parametrize("cls", _tree(), ids=lambda cls: cls.__name__)
def test_every_kind_of_failure_has_a_hint(cls: type[errors.MangoError]) -> None:
    """Each class below the root gets a hint of its own kind, not the catch-all."""
    hint = hints.hint_for(_bare(cls))
    if cls is errors.MangoError:
        assert hint == "run the command again with -v to see what mango did"
    else:
        assert hint != hints.hint_for(_bare(errors.MangoError)), cls


def test_an_errors_own_hint_wins() -> None:
    """A hint the error carries is shown as it is."""
    assert hints.hint_for(errors.InvalidInput("bad", hint="do this")) == "do this"
