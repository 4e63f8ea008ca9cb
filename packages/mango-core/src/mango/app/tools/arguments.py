"""Tool calls and their arguments, checked strictly before anything runs.

A tool call's arguments are a JSON object, as a model emits it. Each tool's
arguments are an attrs class; :func:`parse_arguments` builds it from the
object and refuses, as :class:`~mango.domain.errors.InvalidInput` listing
every problem (``<problem> @ arguments.<field>``), unknown fields, missing
ones and values of the wrong JSON type: nothing is coerced (``true`` is no
number, ``1`` no string). A value the class's own validators refuse keeps
its error's class (a path outside the workspace stays a
:class:`~mango.domain.errors.PathEscapeError`).

Only the shapes these classes use are understood: ``str``, ``int``,
``float`` (an integer is accepted), ``bool``, ``X | None`` and
``dict[str, str]``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

from mango.domain.errors import InvalidInput, MangoError
from mango.domain.paths import normalize_workspace_dir, normalize_workspace_path

__all__ = [
    "TOOL_NAMES",
    "BashArgs",
    "EditArgs",
    "GlobArgs",
    "GrepArgs",
    "ReadArgs",
    "ToolCall",
    "WriteArgs",
    "parse_arguments",
]


@attrs.frozen
class ToolCall:
    """One tool call: a built-in tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


def positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """attrs validator: None or a number above zero."""
    if value is not None and value <= 0:
        raise InvalidInput(f"{attribute.name} must be positive, got {value!r}")


def _non_empty(_instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value:
        raise InvalidInput(f"{attribute.name} must not be empty")


def _file_path(_instance: object, _attribute: attrs.Attribute[Any], value: str) -> None:
    normalize_workspace_path(value)


def _dir_path(_instance: object, _attribute: attrs.Attribute[Any], value: str) -> None:
    normalize_workspace_dir(value)


@attrs.frozen
class BashArgs:
    """Arguments of ``bash``: a shell script run by ``/bin/sh -c``."""

    command: str = attrs.field(validator=_non_empty)
    timeout: float | None = attrs.field(default=None, validator=positive)
    cwd: str = attrs.field(default="", validator=_dir_path)
    env: dict[str, str] = attrs.field(factory=dict)
    stdin: str = ""


@attrs.frozen
class ReadArgs:
    """Arguments of ``read``: a text file, optionally a window of its lines."""

    path: str = attrs.field(validator=_file_path)
    offset: int = attrs.field(default=1, validator=positive)
    """First line to return, 1-based."""
    limit: int | None = attrs.field(default=None, validator=positive)
    """Number of lines to return; all by default."""


@attrs.frozen
class WriteArgs:
    """Arguments of ``write``: create or replace a file with text."""

    path: str = attrs.field(validator=_file_path)
    content: str


@attrs.frozen
class EditArgs:
    """Arguments of ``edit``: replace the one occurrence of ``old_string``."""

    path: str = attrs.field(validator=_file_path)
    old_string: str = attrs.field(validator=_non_empty)
    new_string: str

    def __attrs_post_init__(self) -> None:
        if self.old_string == self.new_string:
            raise InvalidInput("old_string and new_string are the same; nothing to edit")


@attrs.frozen
class GlobArgs:
    """Arguments of ``glob``: files under ``path`` whose relative path matches ``pattern``."""

    pattern: str = attrs.field(validator=_non_empty)
    path: str = attrs.field(default="", validator=_dir_path)


@attrs.frozen
class GrepArgs:
    """Arguments of ``grep``: lines matching ``pattern`` in files under ``path``."""

    pattern: str = attrs.field(validator=_non_empty)
    path: str = attrs.field(default="", validator=_dir_path)
    include: str | None = None
    """Only files whose name matches this glob (``find -name``)."""
    ignore_case: bool = False
    fixed_strings: bool = False


_ARGS: dict[str, type[Any]] = {
    "bash": BashArgs,
    "read": ReadArgs,
    "write": WriteArgs,
    "edit": EditArgs,
    "glob": GlobArgs,
    "grep": GrepArgs,
}
TOOL_NAMES: tuple[str, ...] = tuple(sorted(_ARGS))
"""Names of the built-in tools."""
_HINTS = {args_type: typing.get_type_hints(args_type) for args_type in _ARGS.values()}

# What each JSON scalar type accepts: a bool is no number, an int is a float.
_ACCEPTED: dict[type, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
}


class _Problem(Exception):
    """What is wrong with one value; ``where`` is its place inside it (``[key]``)."""

    def __init__(self, text: str, where: str = "") -> None:
        super().__init__(text)
        self.text = text
        self.where = where


class _Problems(Exception):
    """Every problem found, each as ``<problem> @ arguments<place>``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _scalar(kind: type, value: Any) -> Any:
    accepted = _ACCEPTED[kind]
    if isinstance(value, bool) and bool not in accepted:
        raise _Problem(f"expected {kind.__name__}, got bool")
    if not isinstance(value, accepted):
        raise _Problem(f"expected {kind.__name__}, got {type(value).__name__}")
    return kind(value)


def _mapping(key_type: Any, value_type: Any, value: Any, place: str) -> dict[Any, Any]:
    """A dict of checked entries; every bad entry is one problem at ``place[key]``."""
    try:
        items = value.items()
    except AttributeError:
        raise _Problems([f"expected a mapping @ {place}"]) from None
    result: dict[Any, Any] = {}
    problems: list[str] = []
    for key, item in items:
        try:  # the value first, then the key
            checked = _convert(value_type, item)
            result[_convert(key_type, key)] = checked
        except _Problem as problem:
            problems.append(f"{problem.text} @ {place}[{key!r}]")
    if problems:
        raise _Problems(problems)
    return result


def _convert(kind: Any, value: Any, place: str = "") -> Any:
    """``value`` as ``kind``, or :class:`_Problem` (:class:`_Problems` for a mapping)."""
    if kind in _ACCEPTED:
        return _scalar(kind, value)
    options = typing.get_args(kind)
    if isinstance(kind, types.UnionType) and type(None) in options:
        if value is None:
            return None
        (inner,) = (option for option in options if option is not type(None))
        return _convert(inner, value, place)
    if typing.get_origin(kind) is dict:
        key_type, value_type = options
        return _mapping(key_type, value_type, value, place)
    raise TypeError(f"tool arguments of type {kind!r} are not supported")  # pragma: no cover


def _values(args_type: type[Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The checked keyword arguments of ``args_type``, or :class:`_Problems` listing all."""
    hints = _HINTS[args_type]
    fields = attrs.fields(args_type)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for field in fields:
        place = f"arguments.{field.name}"
        if field.name not in arguments:
            if field.default is attrs.NOTHING:
                problems.append(f"required field missing @ {place}")
            continue
        try:
            values[field.name] = _convert(hints[field.name], arguments[field.name], place)
        except _Problem as problem:
            problems.append(f"{problem.text} @ {place}")
        except _Problems as found:
            problems.extend(found.problems)
    extra = set(arguments) - {field.name for field in fields}
    if extra:
        problems.append(f"extra fields found ({', '.join(sorted(extra))}) @ arguments")
    if problems:
        raise _Problems(problems)
    return values


def parse_arguments(call: ToolCall) -> Any:
    """Validate ``call`` and return its typed arguments, or raise :class:`InvalidInput`."""
    args_type = _ARGS.get(call.name)
    if args_type is None:
        raise InvalidInput(
            f"unknown tool {call.name!r}; the built-in tools are {', '.join(TOOL_NAMES)}"
        )
    if not isinstance(call.arguments, dict):
        raise InvalidInput(f"arguments of {call.name!r} must be a JSON object")
    prefix = f"invalid arguments for {call.name!r}"
    try:
        values = _values(args_type, call.arguments)
    except _Problems as found:
        raise InvalidInput(f"{prefix}: {found}") from None
    try:
        return args_type(**values)
    except MangoError as exc:
        raise _same_kind(exc, f"{prefix}: {exc} @ arguments") from exc


def _same_kind(exc: MangoError, message: str) -> MangoError:
    """A copy of ``exc`` (same class, so PathEscapeError stays one) with ``message``."""
    copy = type(exc).__new__(type(exc))
    MangoError.__init__(copy, message, hint=exc.hint)
    return copy
