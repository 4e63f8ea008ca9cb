"""docs/plugin-authors.md as a build script: its fenced blocks, and the project they make.

Every file of the guide's example project is a fenced block right after a
``<!-- file: PATH -->`` line; the layout block of section 1 lists the files,
and its console block makes the directories and the empty ``py.typed``.
:func:`build_project` writes exactly that into a directory, so the tests can
build, install and run what a reader following the text gets, and compare it
with ``docs/example-provider``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import attrs

from .support import REPO

GUIDE = REPO / "docs" / "plugin-authors.md"
EXAMPLE = REPO / "docs" / "example-provider"
PROJECT = "mango-provider-tinybox"
BROUGHT = frozenset({"LICENSE"})
"""Files the layout lists that the reader brings (the guide shows no text for them)."""

_BLOCK = re.compile(
    r"(?:^<!-- file: (?P<file>\S+) -->\n)?^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


@attrs.frozen
class Snippet:
    """One fenced block of the guide."""

    lang: str
    body: str
    line: int
    file: str | None
    """The project file this block is, if it is one."""

    def __str__(self) -> str:
        where = f" {self.file}" if self.file else ""
        return f"{GUIDE.name}:{self.line} ({self.lang or 'text'}{where})"


def snippets(text: str) -> list[Snippet]:
    """The fenced blocks of ``text``, in order."""
    return [
        Snippet(
            lang=match["lang"],
            body=match["body"],
            line=text.count("\n", 0, match.start("body")) + 1,
            file=match["file"],
        )
        for match in _BLOCK.finditer(text)
    ]


TEXT = GUIDE.read_text(encoding="utf-8")
SNIPPETS = snippets(TEXT)


def section(title: str) -> list[Snippet]:
    """The blocks of the section whose heading starts with ``title``."""
    start = TEXT.index(f"\n## {title}")
    end = TEXT.find("\n## ", start + 1)
    first = TEXT.count("\n", 0, start)
    last = TEXT.count("\n", 0, end if end != -1 else len(TEXT))
    return [snippet for snippet in SNIPPETS if first < snippet.line <= last]


def file_blocks() -> dict[str, str]:
    """``{path: text}`` of every project file the guide shows."""
    files: dict[str, str] = {}
    for snippet in SNIPPETS:
        if snippet.file is not None:
            if snippet.file in files:
                raise AssertionError(f"{snippet} shows {snippet.file} a second time")
            files[snippet.file] = snippet.body
    return files


def layout() -> set[str]:
    """The files the layout block of section 1 lists, as paths below the project."""
    (tree,) = [snippet for snippet in section("1. The layout") if snippet.lang == ""]
    lines = tree.body.splitlines()
    if lines[0] != f"{PROJECT}/":
        raise AssertionError(f"the layout starts with {lines[0]!r}, not {PROJECT}/")
    stack: list[tuple[int, str]] = []
    files = set()
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(part for _, part in stack) + name
        if name.endswith("/"):
            stack.append((indent, name))
        else:
            files.add(path)
    return files


def shell_steps() -> list[list[str]]:
    """The ``mkdir -p`` and ``touch`` commands of section 1, as argv lists."""
    steps = []
    for snippet in section("1. The layout"):
        if snippet.lang != "console":
            continue
        for line in snippet.body.splitlines():
            argv = shlex.split(line.removeprefix("$ "))
            if argv[:2] == ["mkdir", "-p"] or argv[:1] == ["touch"]:
                steps.append(argv)
            else:
                raise AssertionError(f"section 1 runs {line!r}, which build_project cannot follow")
    return steps


def build_project(parent: Path) -> Path:
    """Do what the guide says in an empty directory: ``parent / PROJECT``; return it."""
    project = parent / PROJECT
    project.mkdir()
    for argv in shell_steps():
        for name in argv[2:] if argv[0] == "mkdir" else argv[1:]:
            target = project / name
            if argv[0] == "mkdir":
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.touch()
    for name, text in file_blocks().items():
        target = project / name
        if not target.parent.is_dir():
            raise AssertionError(f"the guide writes {name} before making its directory")
        target.write_text(text, encoding="utf-8")
    return project


def project_files(project: Path) -> dict[str, bytes]:
    """Every file below ``project`` (caches left out), by relative path."""
    return {
        str(path.relative_to(project)): path.read_bytes()
        for path in sorted(project.rglob("*"))
        if path.is_file()
        and not any(part in {"__pycache__", ".pytest_cache", ".hypothesis"} for part in path.parts)
    }
