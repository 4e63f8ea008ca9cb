"""docs/plugin-authors.md builds its example project, and that project is docs/example-provider.

Every file of the project is a whole block of the guide (``<!-- file: PATH
-->``); section 1's layout lists them and its commands make the directories.
:func:`tests.guide.build_project` follows the text into an empty directory,
and ``docs/example-provider`` must hold exactly what it builds, byte for
byte (``tests/test_plugin_author_routes.py`` installs and runs the built
project). Python blocks that are not project files compile and use no name
they do not define or import; TOML blocks are valid ``pyproject.toml``
content; the CI job is valid YAML.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from validate_pyproject import api as validate_pyproject

from .guide import (
    BROUGHT,
    EXAMPLE,
    GUIDE,
    SNIPPETS,
    TEXT,
    Snippet,
    build_project,
    file_blocks,
    layout,
    project_files,
)


def _of(lang: str, *, project_file: bool | None = None) -> list[Snippet]:
    return [
        snippet
        for snippet in SNIPPETS
        if snippet.lang == lang
        and (project_file is None or (snippet.file is not None) == project_file)
    ]


def test_the_guide_has_the_snippets_this_test_expects() -> None:
    """The parser sees the guide's blocks (a silent mismatch would check nothing)."""
    assert set(file_blocks()) >= {
        "pyproject.toml",
        "README.md",
        "src/mango_provider_tinybox/__init__.py",
        "src/mango_provider_tinybox/sandbox.py",
        "src/mango_provider_tinybox/provider.py",
        "src/mango_provider_tinybox/plugin.py",
        "tests/test_conformance.py",
    }
    assert len(_of("python", project_file=False)) >= 2
    assert len(_of("toml")) >= 2
    assert len(_of("yaml")) == 1


def test_the_layout_lists_every_file_and_the_guide_gives_each(tmp_path: Path) -> None:
    """Each file the layout lists is shown, made by a command, or brought by the reader."""
    built = set(project_files(build_project(tmp_path)))
    assert layout() == built | BROUGHT
    assert set(file_blocks()) <= built


def test_the_example_is_what_the_guide_builds(tmp_path: Path) -> None:
    """docs/example-provider holds exactly the files the guide makes, with the same bytes."""
    built = project_files(build_project(tmp_path))
    example = project_files(EXAMPLE)
    assert set(example) - BROUGHT == set(built), "files differ"
    different = [name for name in built if built[name] != example[name]]
    assert different == [], f"docs/example-provider differs from the guide in {different}"


def test_a_changed_guide_is_noticed(tmp_path: Path) -> None:
    """The comparison above can fail: one changed byte in a built file is found."""
    project = build_project(tmp_path)
    target = project / "src" / "mango_provider_tinybox" / "sandbox.py"
    target.write_text(target.read_text().replace("65536", "65535"))
    built = project_files(project)
    example = project_files(EXAMPLE)
    assert [name for name in built if built[name] != example[name]] == [
        "src/mango_provider_tinybox/sandbox.py"
    ]


def test_every_file_the_pyproject_names_is_in_the_project(tmp_path: Path) -> None:
    """readme, the wheel's packages and the entry point's module exist (a build needs them)."""
    project = build_project(tmp_path)
    document = tomllib.loads((project / "pyproject.toml").read_text())
    assert (project / document["project"]["readme"]).is_file()
    for package in document["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert (project / package / "__init__.py").is_file()
    for target in document["project"]["entry-points"]["mango"].values():
        module = Path("src", *target.split(".")).with_suffix(".py")
        assert (project / module).is_file()


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


@pytest.mark.parametrize("snippet", _of("python", project_file=False), ids=str)
def test_whole_snippets_define_every_name_they_use(snippet: Snippet) -> None:
    """A Python block that is not a project file compiles and uses no undefined helper."""
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


def test_an_invalid_pyproject_is_refused() -> None:
    """The validation can fail: a project without a version is not valid."""
    with pytest.raises(ValueError, match="version"):
        _validate({"project": {"name": "x", "dependencies": []}})


def test_the_pyproject_quiets_pytest_asyncio() -> None:
    """The suite runs on pytest-asyncio, which warns on every run without a loop scope."""
    document = tomllib.loads(file_blocks()["pyproject.toml"])
    options = document["tool"]["pytest"]["ini_options"]
    assert options["asyncio_default_fixture_loop_scope"] == "function"


def test_the_ci_job_is_valid_yaml() -> None:
    """The guide's workflow parses, and installs with the mango wheels at hand."""
    (job,) = _of("yaml")
    workflow = yaml.safe_load(job.body)
    assert set(workflow["jobs"]) == {"offline", "live"}
    assert workflow["env"]["PIP_FIND_LINKS"]
    assert workflow["jobs"]["offline"]["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]


def test_the_guide_starts_in_a_virtual_environment() -> None:
    """Section 0 makes and activates a venv before anything is installed."""
    first = next(snippet for snippet in SNIPPETS if snippet.lang == "console")
    assert "python3 -m venv .venv && . .venv/bin/activate" in first.body
    assert TEXT.index(first.body) < TEXT.index("pip install")


def test_the_guide_names_the_routes_its_test_takes() -> None:
    """Section 0's three routes are the ones tests/test_plugin_author_routes.py follows."""
    routes = Path(__file__).with_name("test_plugin_author_routes.py").read_text(encoding="utf-8")
    for shown, tested in (
        ("pip install --find-links ~/mango-wheels -e '.[test]'", '"-e", f"{project}[test]"'),
        ("#subdirectory=packages/mango-core", "git_route()"),
        ("pip install --find-links http://127.0.0.1:8765/", '"--find-links", local_index'),
    ):
        assert shown in TEXT
        assert tested in routes
    assert GUIDE.name == "plugin-authors.md"
