"""What an index would show of each distribution: the checks of ``.ci/check-dists``."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

from .support import REPO


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dists", REPO / ".ci" / "check_dists.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_dists", module)
    spec.loader.exec_module(module)
    return module


check_dists = _load_checker()


@pytest.mark.slow
def test_every_distribution_builds_and_passes(tmp_path: Path) -> None:
    """Every wheel and sdist builds, passes twine check --strict and the metadata checks."""
    paths = check_dists.build(tmp_path)
    assert {path.name for path in paths} >= {
        "mango_core-0.1.0-py3-none-any.whl",
        "mango_core-0.1.0.tar.gz",
        "mango_conformance-0.1.0-py3-none-any.whl",
        "mango_provider_docker-0.1.0.tar.gz",
        "mango_provider_tinybox-0.1.0-py3-none-any.whl",
    }
    assert check_dists.check(paths) == []


def test_relative_links_are_found_and_urls_pass() -> None:
    """Links to sibling files, anchors and ../shared break on an index page; URLs do not."""
    markdown = (
        "See [the guide](../../docs/plugin-authors.md), [a section](#settings),\n"
        "![logo](img/logo.png), <a href='../shared/ARCHITECTURE.md'>design</a>.\n"
        "[ref]: ../mango-core/README.md\n"
        "Fine: [site](https://example.org/x), [mail](mailto:a@example.org),\n"
        "`[not a link](in/code.md)` and\n```\n[nor](this.md)\n```\n"
    )
    assert check_dists.relative_links(markdown) == [
        "../../docs/plugin-authors.md",
        "#settings",
        "img/logo.png",
        "../mango-core/README.md",
        "../shared/ARCHITECTURE.md",
    ]


def _metadata(*requires: str) -> object:
    import email.message

    message = email.message.Message()
    for line in requires:
        message["Requires-Dist"] = line
    return message


def test_sibling_requirements_need_both_bounds() -> None:
    """A requirement on a mango-* distribution needs a lower and an upper bound."""
    versions = {"mango-core": Version("0.1.0")}
    assert check_dists.sibling_problems(
        _metadata(
            "mango-core",
            "mango-core>=0.1.0",
            "mango-core<0.2",
            "mango-core>=0.2,<0.3",
            "mango-core>=0.1.0,<0.2",
            "attrs",
        ),
        versions,
        "x.whl",
    ) == [
        "x.whl: 'mango-core' has no lower bound",
        "x.whl: 'mango-core' has no upper bound",
        "x.whl: 'mango-core>=0.1.0' has no upper bound",
        "x.whl: 'mango-core<0.2' has no lower bound",
        "x.whl: 'mango-core>=0.2,<0.3' excludes the current mango-core 0.1.0",
    ]


def _wheel(path: Path, metadata: str, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("demo-0.1.0.dist-info/METADATA", metadata)
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


def test_a_wheel_without_license_text_or_python_classifiers_fails(tmp_path: Path) -> None:
    """A declared license file must be in the archive; each supported Python needs a classifier."""
    metadata = io.StringIO()
    metadata.write("Metadata-Version: 2.4\nName: demo\nVersion: 0.1.0\n")
    metadata.write("License-Expression: Apache-2.0\nLicense-File: LICENSE\n")
    metadata.write("Requires-Python: >=3.11,<3.13\n")
    metadata.write("Classifier: Programming Language :: Python :: 3.11\n")
    metadata.write("Description-Content-Type: text/markdown\n\nSee [docs](docs/x.md).\n")
    wheel = _wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", metadata.getvalue(), {})
    assert check_dists.check_archive(wheel, {}, for_old_pips=False) == [
        "demo-0.1.0-py3-none-any.whl: License-File LICENSE is not in the archive",
        "demo-0.1.0-py3-none-any.whl: no classifier for Python 3.12",
        "demo-0.1.0-py3-none-any.whl: no classifier for Python 3.13",
        "demo-0.1.0-py3-none-any.whl: Requires-Python '>=3.11,<3.13' excludes 3.13",
        (
            "demo-0.1.0-py3-none-any.whl: the long description links to 'docs/x.md', "
            "which breaks outside the repository"
        ),
    ]


def test_each_distribution_ships_the_apache_license() -> None:
    """Every distribution directory holds the same full Apache-2.0 text as the repository."""
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert all(marker in text for marker in check_dists._APACHE_MARKERS)
    projects = [*sorted((REPO / "packages").iterdir()), REPO / "docs" / "example-provider"]
    assert {
        project.name: (project / "LICENSE").read_text(encoding="utf-8") for project in projects
    } == {project.name: text for project in projects}


APACHE = (REPO / "LICENSE").read_bytes()


def _license_metadata(*lines: str) -> str:
    head = "Metadata-Version: 2.3\nName: demo\nVersion: 0.1.0\nRequires-Python: >=3.11\n"
    classifiers = "".join(
        f"Classifier: Programming Language :: Python :: {v}\n" for v in ("3.11", "3.12", "3.13")
    )
    body = "Description-Content-Type: text/markdown\n\nDemo.\n"
    return head + "".join(f"{line}\n" for line in lines) + classifiers + body


@pytest.mark.parametrize(
    ("lines", "problems"),
    [
        (
            ["License-Expression: Apache-2.0", "License-File: LICENSE"],
            [
                (
                    "License is None, not 'Apache-2.0' "
                    "(the only license field pip 23.2.1's pip show prints)"
                ),
                f"no {check_dists.LICENSE_CLASSIFIER!r} classifier",
            ],
        ),
        (
            [
                "License: Apache-2.0",
                "License-Expression: Apache-2.0",
                "Classifier: License :: OSI Approved :: Apache Software License",
            ],
            ["both License and License-Expression (exclusive since core metadata 2.4)"],
        ),
        (
            [
                "License: Apache-2.0",
                "Classifier: License :: OSI Approved :: Apache Software License",
            ],
            [],
        ),
    ],
    ids=["pep-639-only", "both-fields", "readable-by-pip-23"],
)
def test_a_member_license_must_read_in_old_pips(
    tmp_path: Path, lines: list[str], problems: list[str]
) -> None:
    """A member says License: Apache-2.0 with the classifier, never beside License-Expression."""
    wheel = _wheel(
        tmp_path / "demo-0.1.0-py3-none-any.whl",
        _license_metadata(*lines),
        {"demo-0.1.0.dist-info/licenses/LICENSE": APACHE},
    )
    where = wheel.name
    assert check_dists.check_archive(wheel, {}) == [f"{where}: {problem}" for problem in problems]


def test_an_extra_that_adds_nothing_is_a_problem(tmp_path: Path) -> None:
    """Provides-Extra without a requirement under it (mango-core's old [embedded]) is reported."""
    metadata = _license_metadata(
        "License: Apache-2.0",
        "Classifier: License :: OSI Approved :: Apache Software License",
        "Provides-Extra: docker",
        "Provides-Extra: embedded",
        'Requires-Dist: mango-provider-docker<0.2,>=0.1.0; extra == "docker"',
    )
    wheel = _wheel(
        tmp_path / "demo-0.1.0-py3-none-any.whl",
        metadata,
        {"demo-0.1.0.dist-info/licenses/LICENSE": APACHE},
    )
    assert check_dists.check_archive(wheel, {}) == [
        "demo-0.1.0-py3-none-any.whl: the extra 'embedded' adds no requirement"
    ]


@pytest.mark.slow
def test_the_pip_a_fresh_venv_ships_shows_the_license(wheelhouse: Path, tmp_path: Path) -> None:
    """``pip show`` of the pip that ``python -m venv`` installs (23.2.1 on 3.11) prints it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    version = subprocess.run([*pip, "--version"], check=True, capture_output=True, text=True)
    wheels = sorted(str(wheel) for wheel in wheelhouse.glob("mango_*.whl"))
    subprocess.run(
        [*pip, "install", "--quiet", "--no-index", "--no-deps", *wheels],
        check=True,
        capture_output=True,
    )
    names = [Path(wheel).name.split("-", 1)[0].replace("_", "-") for wheel in wheels]
    shown = subprocess.run(
        [*pip, "show", *names], check=True, capture_output=True, text=True
    ).stdout
    licenses = [line for line in shown.splitlines() if line.startswith("License:")]
    assert licenses == ["License: Apache-2.0"] * len(names), (version.stdout, shown)
