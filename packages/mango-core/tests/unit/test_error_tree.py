"""The error tree in mango.domain.errors' docstring is complete and every verdict is explicit."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import mango.domain.errors as errors_module
from mango.domain.errors import MangoError, PermanentError

DISTRIBUTIONS = ("mango", "mango_provider_docker")


def _import_everything() -> None:
    for top in DISTRIBUTIONS:
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{top}."):
            importlib.import_module(info.name)


def defined_errors() -> list[type[MangoError]]:
    """Every MangoError subclass defined in mango-core and the Docker distribution."""
    _import_everything()
    found: dict[str, type[MangoError]] = {}
    pending: list[type[MangoError]] = [MangoError]
    while pending:
        cls = pending.pop()
        if cls.__module__.split(".")[0] in DISTRIBUTIONS:
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        pending.extend(cls.__subclasses__())
    return [found[name] for name in sorted(found)]


def documented_tree() -> dict[str, str | None]:
    """``{name: parent name}`` read from the tree drawing in the module docstring."""
    doc = errors_module.__doc__ or ""
    drawing = doc.split("::\n", 1)[1].split("\n\n", 1)[0]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in drawing.splitlines():
        match = re.search(r"(?:── )?([A-Z][A-Za-z]+)", line)
        if match is None or ("──" not in line and line.strip().split()[0] != "MangoError"):
            continue  # a continuation line of a description
        depth = match.start(1)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(1)] = stack[-1][1] if stack else None
        stack.append((depth, match.group(1)))
    return parents


ERRORS = defined_errors()


def test_the_walk_finds_the_errors_of_every_layer() -> None:
    """The discovery itself works: errors from several modules are found."""
    modules = {cls.__module__ for cls in ERRORS}
    assert "mango.domain.errors" in modules
    assert len(ERRORS) >= 20
    assert not modules - {"mango.domain.errors"}, (
        "define MangoError subclasses in mango.domain.errors and re-export them elsewhere"
    )


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_is_in_the_docstring_tree_under_its_parent(cls: type[MangoError]) -> None:
    """The drawing lists the class under its real base class."""
    tree = documented_tree()
    assert cls.__name__ in tree, f"{cls.__name__} is missing from the tree in mango.domain.errors"
    expected = None if cls is MangoError else cls.__bases__[0].__name__
    assert tree[cls.__name__] == expected


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_has_an_explicit_documented_verdict(cls: type[MangoError]) -> None:
    """``permanent`` is set on the class or a parent below the root, and the setter says why."""
    setter = next(klass for klass in cls.__mro__ if "permanent" in vars(klass))
    assert setter is not MangoError or cls is MangoError, (
        f"{cls.__name__} inherits its verdict from MangoError by default; set permanent explicitly"
    )
    assert isinstance(vars(setter)["permanent"], bool)
    assert cls.__doc__
    why = (setter.__doc__ or "").lower()
    assert "retry" in why or "permanent" in why, f"{setter.__name__}'s docstring must say why"
    assert cls.permanent is issubclass(cls, PermanentError)


def test_tree_has_no_stale_names() -> None:
    """Every name drawn is a real error class."""
    names = {cls.__name__ for cls in ERRORS}
    assert set(documented_tree()) <= names
