"""The runner of the built-in agent tools, through the :class:`~mango.domain.ports.Sandbox` port.

:class:`ToolRunner` checks a :class:`~mango.app.tools.arguments.ToolCall`
(:func:`~mango.app.tools.arguments.parse_arguments`), runs it in the sandbox
and caps what comes back; :mod:`mango.app.tools` says what each tool does.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from mango.app.tools.arguments import (
    BashArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    ReadArgs,
    ToolCall,
    WriteArgs,
    parse_arguments,
    positive,
)
from mango.app.tools.globs import glob_to_regex
from mango.app.tools.lines import read_line_window
from mango.domain.errors import CapabilityNotSupported, FileTooLarge, PermanentError, ToolFailed
from mango.domain.limits import DEFAULT_MAX_READ_BYTES
from mango.domain.paths import normalize_workspace_dir
from mango.domain.ports import Sandbox
from mango.domain.sandbox_ports import FileKind, FileSystemSandbox
from mango.domain.values import Command, ExecResult

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_MAX_TOOL_OUTPUT_BYTES",
    "GLOB_SCAN_LIMIT",
    "TRUNCATION_MARKER",
    "ToolResult",
    "ToolRunner",
]

DEFAULT_MAX_TOOL_OUTPUT_BYTES = 100_000
"""Default cap on each output stream and on the rendered text of a result: what a model reads.

Not the providers' per-stream cap (``DEFAULT_MAX_OUTPUT_BYTES``, 1 MiB, applied
at the source): a tool result is sized for a model's context. ``max_read_bytes``
defaults to the one ``DEFAULT_MAX_READ_BYTES`` (``mango worker`` passes the
configured ``MANGO_MAX_READ_BYTES``)."""
DEFAULT_MAX_RESULTS = 1000
"""Default cap on the entries ``glob`` and ``grep`` return."""
GLOB_SCAN_LIMIT = 50_000
"""How many entries ``glob`` lists through the file API (the first in path order); past it
the result is flagged truncated, as ``find``'s output past the exec cap is."""
TRUNCATION_MARKER = "\n[output truncated]"
"""Appended to a text cut at the output cap."""


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

    max_output_bytes: int = attrs.field(default=DEFAULT_MAX_TOOL_OUTPUT_BYTES, validator=positive)
    max_results: int = attrs.field(default=DEFAULT_MAX_RESULTS, validator=positive)
    max_read_bytes: int = attrs.field(default=DEFAULT_MAX_READ_BYTES, validator=positive)

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
        if isinstance(sandbox, FileSystemSandbox):
            with contextlib.suppress(CapabilityNotSupported):
                return await self._glob_listed(sandbox, args, regex)
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

    async def _glob_listed(
        self, sandbox: FileSystemSandbox, args: GlobArgs, regex: re.Pattern[str]
    ) -> ToolResult:
        """``glob`` through the file API: one bounded recursive listing, no ``find``."""
        directory = normalize_workspace_dir(args.path)
        try:
            listing = await sandbox.list_dir(directory, recursive=True, limit=GLOB_SCAN_LIMIT)
        except FileNotFoundError:
            raise ToolFailed(f"glob failed: no directory {directory!r} in the workspace") from None
        except CapabilityNotSupported:
            raise  # not declared: the caller lists with find instead
        except PermanentError as exc:  # a file, or a path through a link
            raise ToolFailed(f"glob failed: {exc}") from exc
        prefix = len(directory) + 1 if directory else 0
        matches = [
            entry.path
            for entry in listing.entries
            if entry.kind in (FileKind.FILE, FileKind.SYMLINK) and regex.match(entry.path[prefix:])
        ]
        truncated = listing.truncated or len(matches) > self.max_results
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
