"""Built-in agent tools on a real local sandbox: behaviour, caps and argument checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mango.domain import ExecResult, InvalidInput, PathEscapeError, SandboxSpec
from mango.local import LocalProvider, LocalSandbox
from mango.temporal.tools import (
    ToolCall,
    ToolFailed,
    ToolResult,
    ToolRunner,
    glob_to_regex,
    parse_arguments,
)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    """A fresh local sandbox."""
    provider = LocalProvider(tmp_path / "sandboxes")
    box = await provider.create("tools", SandboxSpec(timeout=30))
    yield box
    await box.destroy()


async def run(
    sandbox: LocalSandbox, name: str, runner: ToolRunner | None = None, **arguments: Any
) -> ToolResult:
    """Run one tool call."""
    return await (runner or ToolRunner()).run(sandbox, ToolCall(name, arguments))


def executed(result: ToolResult) -> ExecResult:
    """The command result a bash step carries."""
    assert result.exec_result is not None
    return result.exec_result


async def test_bash_reports_output_exit_code_and_stderr(sandbox: LocalSandbox) -> None:
    """bash runs through /bin/sh and renders stdout, stderr and the exit code."""
    result = await run(sandbox, "bash", command="echo out; echo err >&2; exit 3")
    assert result.exec_result is not None
    assert (
        executed(result).stdout,
        executed(result).stderr,
        executed(result).exit_code,
    ) == (b"out\n", b"err\n", 3)
    assert "out\n" in result.output
    assert "[stderr]\nerr" in result.output
    assert result.output.endswith("[exit code 3]")


async def test_bash_passes_env_stdin_cwd_and_timeout(sandbox: LocalSandbox) -> None:
    """Environment, stdin and cwd reach the command; a timeout terminates it."""
    result = await run(
        sandbox,
        "bash",
        command='cat; echo "$GREETING"; pwd',
        env={"GREETING": "hi"},
        stdin="from stdin\n",
        cwd="sub/dir",
    )
    lines = executed(result).stdout.decode().splitlines()
    assert lines[:2] == ["from stdin", "hi"]
    assert lines[2].endswith("/sub/dir")
    slow = await run(sandbox, "bash", command="sleep 5", timeout=0.2)
    assert executed(slow).timed_out
    assert "[timed out" in slow.output


async def test_output_is_capped(sandbox: LocalSandbox) -> None:
    """Each stream and the rendered text are capped, with the truncation flag set."""
    runner = ToolRunner(max_output_bytes=1000)
    result = await run(sandbox, "bash", runner, command="head -c 5000 /dev/zero | tr '\\0' a")
    assert len(executed(result).stdout) == 1000
    assert executed(result).stdout_truncated
    assert result.truncated
    assert result.output.endswith("[output truncated]")


async def test_write_then_read_with_a_line_window(sandbox: LocalSandbox) -> None:
    """write creates parents; read returns the requested lines and flags what remains."""
    written = await run(sandbox, "write", path="a/b.txt", content="one\ntwo\nthree\n")
    assert written.output == "wrote 14 bytes to a/b.txt"
    whole = await run(sandbox, "read", path="a/b.txt")
    assert (whole.output, whole.truncated) == ("one\ntwo\nthree\n", False)
    window = await run(sandbox, "read", path="a/b.txt", offset=2, limit=1)
    assert (window.output, window.truncated) == ("two\n", True)


async def test_read_of_a_missing_file_fails(sandbox: LocalSandbox) -> None:
    """A missing file is a ToolFailed naming it."""
    with pytest.raises(ToolFailed, match=r"no file 'nope\.txt'"):
        await run(sandbox, "read", path="nope.txt")


async def test_edit_replaces_exactly_one_occurrence(sandbox: LocalSandbox) -> None:
    """edit replaces a unique match and refuses zero or several (overlapping ones too)."""
    await run(sandbox, "write", path="f.txt", content="alpha\nbeta\nbeta\naaa\n")
    edited = await run(sandbox, "edit", path="f.txt", old_string="alpha", new_string="ALPHA")
    assert edited.output == "edited f.txt at line 1"
    with pytest.raises(ToolFailed, match="not found"):
        await run(sandbox, "edit", path="f.txt", old_string="gamma", new_string="x")
    with pytest.raises(ToolFailed, match="occurs 2 times"):
        await run(sandbox, "edit", path="f.txt", old_string="beta", new_string="x")
    with pytest.raises(ToolFailed, match="occurs"):
        await run(sandbox, "edit", path="f.txt", old_string="aa", new_string="x")
    content = await run(sandbox, "read", path="f.txt")
    assert content.output == "ALPHA\nbeta\nbeta\naaa\n"


async def test_glob_matches_relative_paths(sandbox: LocalSandbox) -> None:
    """* stays in one directory, **/ spans any depth, {a,b} alternates, path narrows."""
    for path in ("top.py", "README.md", "pkg/mod.py", "pkg/deep/x.py", "pkg/deep/y.txt"):
        await run(sandbox, "write", path=path, content="x")
    top = await run(sandbox, "glob", pattern="*.py")
    assert top.output == "top.py"
    every = await run(sandbox, "glob", pattern="**/*.py")
    assert every.output.splitlines() == ["pkg/deep/x.py", "pkg/mod.py", "top.py"]
    braces = await run(sandbox, "glob", pattern="**/*.{md,txt}")
    assert braces.output.splitlines() == ["README.md", "pkg/deep/y.txt"]
    below = await run(sandbox, "glob", pattern="*", path="pkg/deep")
    assert below.output.splitlines() == ["pkg/deep/x.py", "pkg/deep/y.txt"]
    none = await run(sandbox, "glob", pattern="*.rs")
    assert none.output == "no files matched"
    with pytest.raises(ToolFailed, match="glob failed"):
        await run(sandbox, "glob", pattern="*", path="missing")


async def test_glob_caps_the_listing(sandbox: LocalSandbox) -> None:
    """More matches than max_results are cut, with the flag set."""
    await run(sandbox, "bash", command="for i in 1 2 3 4 5; do touch f$i; done")
    result = await run(sandbox, "glob", ToolRunner(max_results=3), pattern="f*")
    assert result.output.splitlines() == ["f1", "f2", "f3"]
    assert result.truncated


async def test_grep_finds_lines_with_file_and_line_number(sandbox: LocalSandbox) -> None:
    """grep prints path:line:text, honours include, case and fixed strings."""
    await run(sandbox, "write", path="src/a.py", content="import os\nNeedle = 1\n")
    await run(sandbox, "write", path="src/b.txt", content="needle here\n-v flag\n")
    found = await run(sandbox, "grep", pattern="needle", ignore_case=True)
    assert sorted(found.output.splitlines()) == ["src/a.py:2:Needle = 1", "src/b.txt:1:needle here"]
    only_py = await run(sandbox, "grep", pattern="needle", ignore_case=True, include="*.py")
    assert only_py.output == "src/a.py:2:Needle = 1"
    dash = await run(sandbox, "grep", pattern="-v", fixed_strings=True)
    assert dash.output == "src/b.txt:2:-v flag"
    regex = await run(sandbox, "grep", pattern="^N[a-z]+ =", path="src")
    assert regex.output == "src/a.py:2:Needle = 1"
    assert (await run(sandbox, "grep", pattern="absent")).output == "no matches"
    with pytest.raises(ToolFailed, match="grep failed"):
        await run(sandbox, "grep", pattern="(unclosed")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall("rm", {}), "unknown tool 'rm'"),
        (ToolCall("bash", {}), "required field missing"),
        (ToolCall("bash", {"command": 3}), "expected str, got int"),
        (ToolCall("bash", {"command": "ls", "extra": 1}), "extra fields found"),
        (ToolCall("read", {"path": "a", "offset": True}), "expected int, got bool"),
        (ToolCall("read", {"path": "a", "limit": 0}), "limit must be positive"),
        (ToolCall("edit", {"path": "a", "old_string": "", "new_string": "b"}), "must not be empty"),
        (ToolCall("edit", {"path": "a", "old_string": "b", "new_string": "b"}), "are the same"),
    ],
)
def test_invalid_arguments_are_refused_with_reasons(call: ToolCall, message: str) -> None:
    """Malformed calls are InvalidInput naming the problem, before anything runs."""
    with pytest.raises(InvalidInput, match=message):
        parse_arguments(call)


def test_paths_may_not_escape_the_workspace() -> None:
    """Absolute paths and .. are refused at the boundary."""
    for path in ("/etc/passwd", "../x", "a/../../x"):
        with pytest.raises(PathEscapeError):
            parse_arguments(ToolCall("read", {"path": path}))
    with pytest.raises(PathEscapeError):
        parse_arguments(ToolCall("glob", {"pattern": "*", "path": "/"}))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "d/e/a.py", True),
        ("d/**", "d/e/f", True),
        ("?.txt", "ab.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("*.{py,md}", "x.md", True),
        ("a+b.txt", "a+b.txt", True),
        ("a+b.txt", "aab.txt", False),
    ],
)
def test_glob_to_regex(pattern: str, path: str, matches: bool) -> None:
    """Glob semantics for relative paths."""
    assert bool(glob_to_regex(pattern).match(path)) is matches
