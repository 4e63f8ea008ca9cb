"""Tool calls and their arguments, checked strictly before anything runs.

A tool call's arguments are a JSON object, as a model emits it. Each tool's
arguments are an attrs class; :func:`parse_arguments` builds it from the
object and refuses, as :class:`~mango.domain.errors.InvalidInput` listing
every problem (``<problem> @ arguments.<field>``), unknown fields, missing
ones and values of the wrong JSON type: nothing is coerced (``true`` is no
number, ``1`` no string). A value the class's own validators refuse keeps
its error's class (a path outside the workspace stays a
:class:`~mango.domain.errors.PathEscapeError`).

The arguments are structured by the strict variant of the one edge
converter (:data:`mango.app.converter.strict_converter`): plain JSON, extra
keys refused, no JSON type coerced into another (an integer is accepted as
a ``float``).
"""

from __future__ import annotations

from typing import Any

import attrs
import cattrs
from cattrs.v import format_exception

from mango.app.converter import strict_converter
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
        return strict_converter.structure(call.arguments, args_type)
    except MangoError as exc:
        raise _same_kind(exc, f"{prefix}: {exc} @ arguments") from exc
    except cattrs.BaseValidationError as exc:
        problems = cattrs.transform_error(exc, path="arguments", format_exception=_describe)
        message = f"{prefix}: {'; '.join(problems)}"
        leaves = _leaves(exc)
        if len(leaves) == 1 and isinstance(leaves[0], MangoError):
            raise _same_kind(leaves[0], message) from exc
        raise InvalidInput(message) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{prefix}: {exc}") from exc


def _describe(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, MangoError | TypeError):
        return str(exc)
    return format_exception(exc, type_)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _same_kind(exc: MangoError, message: str) -> MangoError:
    """A copy of ``exc`` (same class, so PathEscapeError stays one) with ``message``."""
    copy = type(exc).__new__(type(exc))
    MangoError.__init__(copy, message, hint=exc.hint)
    return copy
