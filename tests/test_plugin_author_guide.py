"""Every snippet of docs/plugin-authors.md is complete: it runs as shown, or is the example's code.

A Python snippet is either whole (it compiles and uses no name it does not
define or import) or marked ``<!-- excerpt: PATH -->`` and then appears word
for word in that file of ``docs/example-provider``, where its helpers are
defined. TOML snippets are valid ``pyproject.toml`` content, and the guide's
project table is the example's own. The CI job is valid YAML.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from validate_pyproject import api as validate_pyproject

from .support import REPO

GUIDE = REPO / "docs" / "plugin-authors.md"
EXAMPLE = REPO / "docs" / "example-provider"
_BLOCK = re.compile(
    r"(?:^<!-- excerpt: (?P<excerpt>\S+) -->\n)?^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


@attrs.frozen
class Snippet:
    """One fenced block of the guide."""

    lang: str
    body: str
    line: int
    excerpt: str | None

    def __str__(self) -> str:
        return f"{GUIDE.name}:{self.line} ({self.lang})"


def snippets(text: str) -> list[Snippet]:
    """The fenced blocks of ``text``, in order."""
    return [
        Snippet(
            lang=match["lang"],
            body=match["body"],
            line=text.count("\n", 0, match.start("body")) + 1,
            excerpt=match["excerpt"],
        )
        for match in _BLOCK.finditer(text)
    ]


SNIPPETS = snippets(GUIDE.read_text(encoding="utf-8"))


def _of(lang: str, *, excerpt: bool | None = None) -> list[Snippet]:
    return [
        snippet
        for snippet in SNIPPETS
        if snippet.lang == lang and (excerpt is None or (snippet.excerpt is not None) == excerpt)
    ]


def test_the_guide_has_the_snippets_this_test_expects() -> None:
    """The parser sees the guide's blocks (a silent mismatch would check nothing)."""
    assert len(_of("python", excerpt=True)) >= 6
    assert len(_of("python", excerpt=False)) >= 2
    assert len(_of("toml")) >= 2
    assert len(_of("yaml")) == 1


def contains_verbatim(source: str, snippet: str) -> bool:
    """True if ``snippet``'s lines appear consecutively in ``source``, shifted by one indent."""
    wanted = textwrap.dedent(snippet).splitlines()
    lines = source.splitlines()
    for start, line in enumerate(lines):
        if line.strip() != wanted[0].strip() or not line.endswith(wanted[0]):
            continue
        indent = line[: len(line) - len(wanted[0])]
        window = lines[start : start + len(wanted)]
        if window == [indent + want if want else "" for want in wanted]:
            return True
    return False


@pytest.mark.parametrize("snippet", _of("python", excerpt=True), ids=str)
def test_excerpts_are_the_example_code(snippet: Snippet) -> None:
    """An excerpt is word for word in the file it names, where its helpers are defined."""
    assert snippet.excerpt is not None
    source = (EXAMPLE / snippet.excerpt).read_text(encoding="utf-8")
    assert contains_verbatim(source, snippet.body), (
        f"{snippet} is not in docs/example-provider/{snippet.excerpt} as shown"
    )


def _undefined_names(code: str) -> str:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--no-cache",
            "--select",
            "F821,F822,F823",
            "--output-format",
            "concise",
            "--stdin-filename",
            "snippet.py",
            "-",
        ],
        input=code,
        capture_output=True,
        text=True,
        check=False,
    )
    return "" if completed.returncode == 0 else completed.stdout + completed.stderr


@pytest.mark.parametrize("snippet", _of("python", excerpt=False), ids=str)
def test_whole_snippets_define_every_name_they_use(snippet: Snippet) -> None:
    """A snippet that is not an excerpt compiles and uses no undefined helper."""
    compile(snippet.body, str(snippet), "exec")
    assert _undefined_names(snippet.body) == ""


def test_undefined_names_are_found() -> None:
    """The check above can fail: a helper that is never defined is reported."""
    assert "F821" in _undefined_names("async def f() -> None:\n    await api.call()\n")


def _validate(document: dict[str, Any]) -> None:
    validate_pyproject.Validator()(document)


@pytest.mark.parametrize("snippet", _of("toml"), ids=str)
def test_toml_snippets_are_valid_pyproject_content(snippet: Snippet) -> None:
    """Each TOML block parses and validates as pyproject.toml content."""
    _validate(tomllib.loads(snippet.body))


def test_the_guide_pyproject_is_the_example_project() -> None:
    """The guide's [project] table declares what the example's pyproject.toml declares."""
    (shown,) = [tomllib.loads(s.body) for s in _of("toml") if "[project]" in s.body]
    example = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))
    for key in (
        "name",
        "version",
        "requires-python",
        "license",
        "dependencies",
        "optional-dependencies",
        "entry-points",
    ):
        assert shown["project"][key] == example["project"][key], key
    assert shown["build-system"] == example["build-system"]
    assert shown["tool"]["hatch"] == example["tool"]["hatch"]


def test_an_invalid_pyproject_is_refused() -> None:
    """The validation can fail: a project without a version is not valid."""
    with pytest.raises(ValueError, match="version"):
        _validate({"project": {"name": "x", "dependencies": []}})


def test_the_ci_job_is_valid_yaml() -> None:
    """The guide's workflow parses, and installs with the mango wheels at hand."""
    (job,) = _of("yaml")
    workflow = yaml.safe_load(job.body)
    assert set(workflow["jobs"]) == {"offline", "live"}
    assert workflow["env"]["PIP_FIND_LINKS"]
    assert workflow["jobs"]["offline"]["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]


def test_the_guide_names_the_routes_its_test_takes() -> None:
    """Section 0's three routes are the ones tests/test_plugin_author_routes.py follows."""
    text = GUIDE.read_text(encoding="utf-8")
    routes = Path(__file__).with_name("test_plugin_author_routes.py").read_text(encoding="utf-8")
    for shown, tested in (
        ("pip install --find-links ~/mango-wheels -e '.[test]'", '"-e", f"{project}[test]"'),
        ("#subdirectory=packages/mango-core", "#subdirectory=packages/mango-core"),
        ("#subdirectory=packages/conformance", "#subdirectory=packages/conformance"),
        ("pip install --find-links http://127.0.0.1:8765/", '"--find-links", local_index'),
    ):
        assert shown in text
        assert tested in routes
