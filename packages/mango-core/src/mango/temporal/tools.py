"""Built-in agent tools, run through the :class:`~mango.domain.ports.Sandbox` port.

A tool call is a name and a JSON object of arguments, as a model emits it.
The arguments are checked strictly at this boundary (unknown fields, wrong
types and bad values are :class:`~mango.domain.errors.InvalidInput` listing
every problem) before anything runs.

========  ============================================================  ===========================
tool      arguments                                                     runs in the sandbox
========  ============================================================  ===========================
``bash``  ``command``, ``timeout``?, ``cwd``?, ``env``?, ``stdin``?     ``/bin/sh -c command``
``read``  ``path``, ``offset``? (first line, 1-based), ``limit``?       ``Sandbox.open_file``
``write`` ``path``, ``content``                                         ``Sandbox.write_file``
``edit``  ``path``, ``old_string``, ``new_string``                      bounded read, replace, write
``glob``  ``pattern`` (``*``, ``?``, ``[..]``, ``{a,b}``, ``**/``),     ``find``
          ``path``?
``grep``  ``pattern`` (extended regex), ``path``?, ``include``?,        ``find ... -exec grep``
          ``ignore_case``?, ``fixed_strings``?
========  ============================================================  ===========================

So a sandbox image needs only a POSIX ``/bin/sh``, ``find`` and ``grep``
(``glob`` and ``grep`` pass their patterns as argv items, never through a
shell). Every result is capped: each output stream and the rendered text at
``max_output_bytes``, listings at ``max_results`` entries, with the
``truncated`` flag set. ``read`` streams the file and keeps only its window
(:mod:`mango.temporal.lines`): it never holds more than the output cap and
never reads more than ``max_read_bytes`` of the file. ``edit`` reads files of
at most ``max_read_bytes`` (:class:`ToolFailed` beyond), replaces exactly one
occurrence and fails with :class:`ToolFailed` when ``old_string`` occurs zero
times or more than once (overlapping occurrences count).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import cattrs
from cattrs.v import format_exception

from mango.app.converter import strict_converter
from mango.domain.errors import FileTooLarge, InvalidInput, MangoError, ToolFailed
from mango.domain.limits import DEFAULT_MAX_READ_BYTES
from mango.domain.paths import normalize_workspace_dir, normalize_workspace_path
from mango.domain.ports import Sandbox
from mango.domain.values import Command, ExecResult
from mango.temporal.lines import read_line_window

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_MAX_TOOL_OUTPUT_BYTES",
    "TOOL_NAMES",
    "BashArgs",
    "EditArgs",
    "GlobArgs",
    "GrepArgs",
    "ReadArgs",
    "ToolCall",
    "ToolFailed",
    "ToolResult",
    "ToolRunner",
    "WriteArgs",
    "glob_to_regex",
    "parse_arguments",
]

DEFAULT_MAX_TOOL_OUTPUT_BYTES = 100_000
"""Default cap on each output stream and on the rendered text of a result: what a model reads.

Not the providers' per-stream cap (``DEFAULT_MAX_OUTPUT_BYTES``, 1 MiB, applied
at the source): a tool result is sized for a model's context. ``max_read_bytes``
defaults to the one ``DEFAULT_MAX_READ_BYTES`` (``mango worker`` passes the
configured ``MANGO_MAX_READ_BYTES``)."""
DEFAULT_MAX_RESULTS = 1000
"""Default cap on the entries ``glob`` and ``grep`` return."""
TRUNCATION_MARKER = "\n[output truncated]"


@attrs.frozen
class ToolCall:
    """One tool call: a built-in tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ToolResult:
    """What a tool step produced.

    ``output`` is the text meant for the model. ``exec_result`` is set by
    ``bash``: the command's exact (capped) bytes and exit status, for callers
    that want them verbatim (``mango exec``).
    """

    tool: str
    output: str
    truncated: bool = False
    exec_result: ExecResult | None = None


# ---------------------------------------------------------------- arguments


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
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
    timeout: float | None = attrs.field(default=None, validator=_positive)
    cwd: str = attrs.field(default="", validator=_dir_path)
    env: dict[str, str] = attrs.field(factory=dict)
    stdin: str = ""


@attrs.frozen
class ReadArgs:
    """Arguments of ``read``: a text file, optionally a window of its lines."""

    path: str = attrs.field(validator=_file_path)
    offset: int = attrs.field(default=1, validator=_positive)
    """First line to return, 1-based."""
    limit: int | None = attrs.field(default=None, validator=_positive)
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
    try:
        return strict_converter.structure(call.arguments, args_type)
    except MangoError as exc:
        raise _same_kind(exc, f"invalid arguments for {call.name!r}: {exc}") from exc
    except cattrs.BaseValidationError as exc:
        problems = cattrs.transform_error(exc, path="arguments", format_exception=_describe)
        message = f"invalid arguments for {call.name!r}: {'; '.join(problems)}"
        leaves = _leaves(exc)
        if len(leaves) == 1 and isinstance(leaves[0], MangoError):
            raise _same_kind(leaves[0], message) from exc
        raise InvalidInput(message) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid arguments for {call.name!r}: {exc}") from exc


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


# ---------------------------------------------------------------- glob patterns


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif pattern[i] == "{" and (end := pattern.find("}", i)) != -1:
            options = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(option) for option in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob for relative paths: ``*`` and ``?`` stay within one component,
    ``**/`` spans any number of directories, ``[...]`` and ``{a,b}`` as in shells.
    """
    try:
        return re.compile(_translate(pattern) + r"\Z")
    except re.error as exc:
        raise InvalidInput(f"invalid glob pattern {pattern!r}: {exc}") from exc


# ---------------------------------------------------------------- the runner


def _cap_text(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", "ignore") + TRUNCATION_MARKER, True


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _find_root(path: str) -> str:
    directory = normalize_workspace_dir(path)
    return f"./{directory}" if directory else "."


def _relative(found: str) -> str:
    return found[2:] if found.startswith("./") else found


@attrs.frozen
class ToolRunner:
    """Runs built-in tool calls against a sandbox, with output caps.

    ``max_read_bytes`` bounds what ``read`` scans of a file and what ``edit``
    loads; memory stays O(``max_output_bytes``) for ``read`` whatever the file.
    """

    max_output_bytes: int = attrs.field(default=DEFAULT_MAX_TOOL_OUTPUT_BYTES, validator=_positive)
    max_results: int = attrs.field(default=DEFAULT_MAX_RESULTS, validator=_positive)
    max_read_bytes: int = attrs.field(default=DEFAULT_MAX_READ_BYTES, validator=_positive)

    async def run(self, sandbox: Sandbox, call: ToolCall) -> ToolResult:
        """Validate ``call`` and run it; raise :class:`InvalidInput` or :class:`ToolFailed`."""
        args = parse_arguments(call)
        runner: Callable[[Sandbox, Any], Awaitable[ToolResult]] = getattr(self, f"_{call.name}")
        return await runner(sandbox, args)

    def _result(self, tool: str, text: str, truncated: bool = False, **extra: Any) -> ToolResult:
        output, cut = _cap_text(text, self.max_output_bytes)
        return ToolResult(tool=tool, output=output, truncated=truncated or cut, **extra)

    async def _bash(self, sandbox: Sandbox, args: BashArgs) -> ToolResult:
        command = Command(
            ("/bin/sh", "-c", args.command),
            stdin=args.stdin.encode("utf-8"),
            env=args.env,
            cwd=args.cwd,
            timeout=args.timeout,
        )
        raw = await sandbox.exec(command)
        cap = self.max_output_bytes
        result = attrs.evolve(
            raw,
            stdout=raw.stdout[:cap],
            stderr=raw.stderr[:cap],
            stdout_truncated=raw.stdout_truncated or len(raw.stdout) > cap,
            stderr_truncated=raw.stderr_truncated or len(raw.stderr) > cap,
        )
        parts = [_decode(result.stdout)] if result.stdout else []
        if result.stderr:
            parts.append("[stderr]\n" + _decode(result.stderr))
        if result.timed_out:
            parts.append("[timed out; the command was terminated]")
        elif result.cancelled:
            parts.append("[stopped: the Session's sandbox was deleted while the command ran]")
        elif result.exit_code != 0:
            parts.append(f"[exit code {result.exit_code}]")
        truncated = result.stdout_truncated or result.stderr_truncated
        if truncated:
            parts.append(TRUNCATION_MARKER.strip())
        return self._result("bash", "\n".join(parts), truncated, exec_result=result)

    async def _read_text(self, sandbox: Sandbox, path: str) -> bytes:
        try:
            return await sandbox.read_file(path, max_bytes=self.max_read_bytes)
        except FileNotFoundError:
            raise ToolFailed(f"no file {path!r} in the workspace") from None
        except FileTooLarge as exc:
            raise ToolFailed(
                f"{path} is larger than {exc.limit} bytes; edit works on smaller files "
                "(use bash, for example sed -i, for larger ones)"
            ) from None

    async def _read(self, sandbox: Sandbox, args: ReadArgs) -> ToolResult:
        start = args.offset - 1
        end = None if args.limit is None else start + args.limit
        try:
            async with sandbox.open_file(args.path) as chunks:
                window = await read_line_window(
                    chunks,
                    start=start,
                    end=end,
                    cap=self.max_output_bytes,
                    scan_limit=self.max_read_bytes,
                )
        except FileNotFoundError:
            raise ToolFailed(f"no file {args.path!r} in the workspace") from None
        if window.binary:
            return self._result("read", f"{args.path} is a binary file")
        text = window.text
        if window.stopped:
            text += (
                f"\n[stopped after the first {window.scanned} bytes of the file; "
                "use bash (for example sed -n '1000,1100p') for lines further in]"
            )
        return self._result("read", text, window.more or window.stopped)

    async def _write(self, sandbox: Sandbox, args: WriteArgs) -> ToolResult:
        data = args.content.encode("utf-8")
        await sandbox.write_file(args.path, data)
        return self._result("write", f"wrote {len(data)} bytes to {args.path}")

    async def _edit(self, sandbox: Sandbox, args: EditArgs) -> ToolResult:
        data = await self._read_text(sandbox, args.path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailed(f"{args.path} is not UTF-8 text; edit works on text files") from None
        first = text.find(args.old_string)
        if first == -1:
            raise ToolFailed(f"old_string was not found in {args.path}")
        if text.find(args.old_string, first + 1) != -1:
            count = text.count(args.old_string)
            raise ToolFailed(
                f"old_string occurs {max(count, 2)} times in {args.path}; "
                "include more surrounding text so that it matches exactly once"
            )
        edited = text[:first] + args.new_string + text[first + len(args.old_string) :]
        await sandbox.write_file(args.path, edited.encode("utf-8"))
        line = text.count("\n", 0, first) + 1
        return self._result("edit", f"edited {args.path} at line {line}")

    async def _listing(self, sandbox: Sandbox, argv: tuple[str, ...]) -> tuple[ExecResult, str]:
        result = await sandbox.exec(Command(argv))
        if result.timed_out:
            raise ToolFailed(f"{argv[0]} timed out")
        return result, _decode(result.stderr).strip()

    async def _glob(self, sandbox: Sandbox, args: GlobArgs) -> ToolResult:
        regex = glob_to_regex(args.pattern)
        root = _find_root(args.path)
        argv = ("find", root, "(", "-type", "f", "-o", "-type", "l", ")", "-print")
        result, errors = await self._listing(sandbox, argv)
        if result.exit_code != 0 and not result.stdout:
            raise ToolFailed(f"glob failed: {errors or f'find exited {result.exit_code}'}")
        prefix = len(root) + 1
        matches = sorted(
            _relative(line)
            for line in _decode(result.stdout).splitlines()
            if line.startswith(root + "/") and regex.match(line[prefix:])
        )
        truncated = result.stdout_truncated or len(matches) > self.max_results
        text = "\n".join(matches[: self.max_results]) if matches else "no files matched"
        return self._result("glob", text, truncated)

    async def _grep(self, sandbox: Sandbox, args: GrepArgs) -> ToolResult:
        root = _find_root(args.path)
        name = ("-name", args.include) if args.include else ()
        flags = ("-n", *(("-i",) if args.ignore_case else ()))
        mode = "-F" if args.fixed_strings else "-E"
        # /dev/null as an extra operand makes grep print the file name even for one file.
        argv = (
            *("find", root, "-type", "f", *name),
            *("-exec", "grep", *flags, mode, "-e", args.pattern, "/dev/null", "{}", "+"),
        )
        result, errors = await self._listing(sandbox, argv)
        lines = [
            _relative(line)
            for line in _decode(result.stdout).splitlines()
            if line.startswith(root + "/")
        ]
        if not lines:
            if errors:
                raise ToolFailed(f"grep failed: {errors}")
            return self._result("grep", "no matches")
        truncated = result.stdout_truncated or len(lines) > self.max_results
        text = "\n".join(lines[: self.max_results])
        if errors:
            text += f"\n[warnings]\n{errors}"
        return self._result("grep", text, truncated)
