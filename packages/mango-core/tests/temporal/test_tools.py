"""Built-in agent tools on a real local sandbox: behaviour, caps and argument checks."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mango.app import SandboxWrapper
from mango.app.tools import (
    ToolCall,
    ToolFailed,
    ToolResult,
    ToolRunner,
    glob_to_regex,
    parse_arguments,
)
from mango.app.tools.lines import read_line_window
from mango.domain import (
    CapabilityNotSupported,
    ExecResult,
    InvalidInput,
    PathEscapeError,
    SandboxSpec,
)
from mango.local import LocalProvider, LocalSandbox


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


@attrs.define
class FindOnly(SandboxWrapper):
    """A sandbox whose provider does not declare the file API: glob falls back to ``find``."""

    async def list_dir(self, *_args: Any, **_kwargs: Any) -> Any:
        raise CapabilityNotSupported("local", ["local does not support the file API"])


@pytest.fixture(params=["file-api", "find"])
def globbing(request: pytest.FixtureRequest, sandbox: LocalSandbox) -> Any:
    """The sandbox with its file API, or wrapped so that glob must use ``find``."""
    return sandbox if request.param == "file-api" else FindOnly(sandbox)


async def test_glob_matches_relative_paths(globbing: LocalSandbox) -> None:
    """* stays in one directory, **/ spans any depth, {a,b} alternates, path narrows.

    The same through the file API and through ``find``; a link is listed, never followed.
    """
    sandbox = globbing
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
    await run(sandbox, "bash", command="ln -s pkg linked && ln -s top.py top-link.py")
    links = await run(sandbox, "glob", pattern="**/*.py")
    assert links.output.splitlines() == ["pkg/deep/x.py", "pkg/mod.py", "top-link.py", "top.py"]
    with pytest.raises(ToolFailed, match="glob failed"):
        await run(sandbox, "glob", pattern="*", path="missing")


async def test_glob_caps_the_listing(globbing: LocalSandbox) -> None:
    """More matches than max_results are cut, with the flag set (file API and ``find``)."""
    sandbox = globbing
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


# ---------------------------------------------------------------- bounded reads


@attrs.define
class CountingSandbox(SandboxWrapper):
    """Counts the bytes the wrapped sandbox streams; a buffered read is an error here."""

    streamed: int = 0

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        raise AssertionError("the read tool must stream, never load the file")

    @contextlib.asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.inner.open_file(path) as chunks:

            async def counted() -> AsyncIterator[bytes]:
                async for chunk in chunks:
                    self.streamed += len(chunk)
                    yield chunk

            yield counted()


async def test_read_streams_only_what_its_window_needs(sandbox: LocalSandbox) -> None:
    """A window at the start of a large file reads one chunk of it, not the file."""
    lines = "".join(f"line {n}\n" for n in range(400_000))  # about 4.7 MB
    await sandbox.write_file("big.log", lines.encode())
    counting = CountingSandbox(sandbox)
    result = await ToolRunner().run(counting, ToolCall("read", {"path": "big.log", "limit": 3}))
    assert (result.output, result.truncated) == ("line 0\nline 1\nline 2\n", True)
    assert counting.streamed <= 1024 * 1024


async def test_read_keeps_at_most_its_output_cap(sandbox: LocalSandbox) -> None:
    """Without a window end, reading stops once the output cap is passed."""
    await sandbox.write_file("big.log", b"0123456789\n" * 500_000)
    counting = CountingSandbox(sandbox)
    runner = ToolRunner(max_output_bytes=1000)
    result = await runner.run(counting, ToolCall("read", {"path": "big.log"}))
    assert result.truncated
    assert result.output.endswith("[output truncated]")
    assert len(result.output.encode()) <= 1000 + len("\n[output truncated]")
    assert counting.streamed <= 1024 * 1024


async def test_read_never_scans_past_its_read_bound(sandbox: LocalSandbox) -> None:
    """Lines beyond max_read_bytes are not reached: the result says so and points at bash."""
    await sandbox.write_file("big.log", b"".join(b"%07d\n" % n for n in range(100_000)))
    counting = CountingSandbox(sandbox)
    runner = ToolRunner(max_read_bytes=64 * 1024)
    call = ToolCall("read", {"path": "big.log", "offset": 90_000, "limit": 2})
    result = await runner.run(counting, call)
    assert result.truncated
    assert result.output.startswith("\n[stopped after the first 65536 bytes of the file")
    assert "sed -n" in result.output
    assert counting.streamed <= 64 * 1024 + 1024 * 1024


async def test_read_of_an_8gib_sparse_file_is_prompt(sandbox: LocalSandbox) -> None:
    """NUL bytes at the start make it binary after one chunk, whatever the size."""
    with (Path(sandbox.root) / "huge.bin").open("wb") as handle:
        handle.truncate(8 * 1024 * 1024 * 1024)
    counting = CountingSandbox(sandbox)
    result = await ToolRunner().run(counting, ToolCall("read", {"path": "huge.bin"}))
    assert result.output == "huge.bin is a binary file"
    assert counting.streamed <= 1024 * 1024


async def test_edit_refuses_a_file_past_its_read_bound(sandbox: LocalSandbox) -> None:
    """edit loads at most max_read_bytes: a larger file is a ToolFailed naming the bound."""
    await sandbox.write_file("f.txt", b"a" * 200)
    runner = ToolRunner(max_read_bytes=100)
    with pytest.raises(ToolFailed, match="larger than 100 bytes"):
        await run(sandbox, "edit", runner, path="f.txt", old_string="a", new_string="b")


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab\r\n\x0b\x85\u2028é", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=6),
    start=st.integers(min_value=0, max_value=8),
    count=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
)
def test_line_window_matches_splitlines(
    text: str, cuts: list[int], start: int, count: int | None
) -> None:
    """However the bytes are chunked, the window is exactly str.splitlines' slice."""
    data = text.encode()
    bounds = sorted({0, len(data), *(cut for cut in cuts if cut < len(data))})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]

    async def stream() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    end = None if count is None else start + count
    window = asyncio.run(
        read_line_window(stream(), start=start, end=end, cap=10_000, scan_limit=10_000)
    )
    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    assert window.text == "".join(lines[start:end])
    assert window.more == (end is not None and end < len(lines))
    assert not window.stopped
