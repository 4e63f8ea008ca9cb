"""Build every distribution of the repository and check what an index would show of it.

Usage: ``python .ci/check_dists.py [OUT_DIR]`` (``.ci/check-dists`` runs it).

It builds a wheel and an sdist of each workspace member (``uv build
--all-packages``) and of the example provider in ``docs/example-provider``,
then checks each archive:

* ``twine check --strict``: the metadata is well formed and the README
  renders as a long description;
* the license: the archive holds the Apache License 2.0 text (every
  ``License-File``, or ``LICENSE``); a workspace member says ``License:
  Apache-2.0`` (the one field ``pip show`` of pip 23.2.1, which Python 3.11
  and 3.12 venvs ship, prints; core metadata 2.3, since 2.4's
  ``License-Expression`` may not sit beside it) and carries the license
  classifier; the example provider may use ``License-Expression`` instead;
  never both fields (an index refuses such an upload);
* every extra adds a requirement (an empty extra promises what it does not
  install);
* the supported Pythons: ``Requires-Python`` and one classifier per supported
  minor version (:data:`SUPPORTED_PYTHONS`);
* requirements on sibling distributions (``mango-*``) have a lower and an
  upper bound, and the sibling's current version satisfies them;
* the long description has no link that breaks outside the repository:
  every link target must be an absolute ``https``/``http``/``mailto`` URL.

Project URLs are not checked: the repository has no public address yet.
Exit status 0 when everything holds, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from email.message import Message
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
SUPPORTED_PYTHONS = ("3.11", "3.12", "3.13")
"""The Python minor versions every distribution declares (and CI runs, where present)."""
EXTRA_PROJECTS = (REPO / "docs" / "example-provider",)
"""Distributions outside the workspace members that are built and checked too."""
SIBLING_PREFIX = "mango-"
_ABSOLUTE = re.compile(r"^(https?://|mailto:)", re.IGNORECASE)
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_APACHE_MARKERS = ("Apache License", "Version 2.0, January 2004", "END OF TERMS AND CONDITIONS")
LICENSE = "Apache-2.0"
LICENSE_CLASSIFIER = "License :: OSI Approved :: Apache Software License"


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise SystemExit("check_dists: uv is not on PATH")
    return found


def build(out_dir: Path) -> list[Path]:
    """Build wheels and sdists of every workspace member and extra project into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    uv = _uv()
    quiet = ["--quiet", "--no-progress"]
    subprocess.run(
        [uv, "build", *quiet, "--all-packages", "-o", str(out_dir)], cwd=REPO, check=True
    )
    for project in EXTRA_PROJECTS:
        subprocess.run(
            [uv, "build", *quiet, "-o", str(out_dir), str(project)], cwd=REPO, check=True
        )
    return archives(out_dir)


def archives(out_dir: Path) -> list[Path]:
    """The wheels and sdists in ``out_dir``, sorted."""
    return sorted([*out_dir.glob("*.whl"), *out_dir.glob("*.tar.gz")])


def twine_check(paths: list[Path]) -> list[str]:
    """``twine check --strict`` over ``paths``; one problem per failing archive."""
    completed = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if completed.returncode == 0:
        return []
    output = (completed.stdout + completed.stderr).strip()
    return [f"twine check --strict failed:\n{output}"]


def read_archive(path: Path) -> tuple[Message, dict[str, bytes]]:
    """The metadata of a wheel or sdist and its members (name -> bytes, top directory removed)."""
    members: dict[str, bytes] = {}
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            for name in wheel.namelist():
                members[name] = wheel.read(name)
        metadata = next(
            data for name, data in members.items() if name.endswith(".dist-info/METADATA")
        )
    else:
        with tarfile.open(path) as sdist:
            for info in sdist.getmembers():
                extracted = sdist.extractfile(info) if info.isfile() else None
                if extracted is not None:
                    members[info.name.split("/", 1)[-1]] = extracted.read()
        metadata = members["PKG-INFO"]
    parsed = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(metadata)
    return parsed, members


def relative_links(markdown: str) -> list[str]:
    """Link targets in ``markdown`` that are not absolute URLs (they break on an index page)."""
    # Code spans and blocks are shown as text, never as links.
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    found = [
        *_INLINE_LINK.findall(text),
        *_REFERENCE_LINK.findall(text),
        *_HTML_LINK.findall(text),
    ]
    return [target for target in found if not _ABSOLUTE.match(target)]


def _license_problems(
    metadata: Message, members: dict[str, bytes], where: str, *, for_old_pips: bool = True
) -> list[str]:
    problems = []
    expression = metadata.get("License-Expression")
    legacy = metadata.get("License")
    if expression and legacy:
        problems.append(
            f"{where}: both License and License-Expression (exclusive since core metadata 2.4)"
        )
    if for_old_pips:
        if legacy != LICENSE:
            problems.append(
                f"{where}: License is {legacy!r}, not {LICENSE!r} "
                "(the only license field pip 23.2.1's pip show prints)"
            )
        if LICENSE_CLASSIFIER not in (metadata.get_all("Classifier") or []):
            problems.append(f"{where}: no {LICENSE_CLASSIFIER!r} classifier")
    elif LICENSE not in (expression, legacy):
        problems.append(f"{where}: no License-Expression (nor License) {LICENSE!r}")
    # Core metadata 2.3 has no License-File: the text is then LICENSE all the same.
    for name in metadata.get_all("License-File") or ["LICENSE"]:
        data = next(
            (
                body
                for member, body in members.items()
                if member == name or member.endswith(f".dist-info/licenses/{name}")
            ),
            None,
        )
        if data is None:
            problems.append(f"{where}: License-File {name} is not in the archive")
        elif not all(marker in data.decode("utf-8", "replace") for marker in _APACHE_MARKERS):
            problems.append(f"{where}: {name} is not the full Apache License 2.0 text")
    return problems


def extra_problems(metadata: Message, where: str) -> list[str]:
    """Extras that add no requirement: ``pip install 'x[extra]'`` would install nothing more."""
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    return [
        f"{where}: the extra {extra!r} adds no requirement"
        for extra in metadata.get_all("Provides-Extra") or []
        if not any(
            requirement.marker is not None and requirement.marker.evaluate({"extra": extra})
            for requirement in requirements
        )
    ]


def _python_problems(metadata: Message, where: str) -> list[str]:
    problems = []
    requires = metadata.get("Requires-Python") or ""
    if not requires:
        problems.append(f"{where}: no Requires-Python")
    classifiers = set(metadata.get_all("Classifier") or [])
    for version in SUPPORTED_PYTHONS:
        if f"Programming Language :: Python :: {version}" not in classifiers:
            problems.append(f"{where}: no classifier for Python {version}")
        if requires and Version(f"{version}.0") not in SpecifierSet(requires):
            problems.append(f"{where}: Requires-Python {requires!r} excludes {version}")
    return problems


def sibling_problems(metadata: Message, versions: dict[str, Version], where: str) -> list[str]:
    """Requirements on ``mango-*`` distributions without both bounds, or excluding the sibling."""
    problems = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if not name.startswith(SIBLING_PREFIX):
            continue
        operators = {spec.operator for spec in requirement.specifier}
        if not operators & {">=", ">", "~=", "=="}:
            problems.append(f"{where}: {line!r} has no lower bound")
        if not operators & {"<", "<=", "~=", "=="}:
            problems.append(f"{where}: {line!r} has no upper bound")
        current = versions.get(name)
        if current is not None and current not in requirement.specifier:
            problems.append(f"{where}: {line!r} excludes the current {name} {current}")
    return problems


def check_archive(
    path: Path, versions: dict[str, Version], *, for_old_pips: bool = True
) -> list[str]:
    """Every problem of one wheel or sdist (twine's checks aside).

    ``for_old_pips``: the license must read in pip 23.2.1's ``pip show``
    (workspace members; the example provider may use PEP 639's field alone).
    """
    metadata, members = read_archive(path)
    where = path.name
    problems = [
        *_license_problems(metadata, members, where, for_old_pips=for_old_pips),
        *_python_problems(metadata, where),
        *sibling_problems(metadata, versions, where),
        *extra_problems(metadata, where),
    ]
    if metadata.get("Description-Content-Type", "").split(";")[0].strip() != "text/markdown":
        problems.append(f"{where}: the long description is not declared as text/markdown")
    body = metadata.get_payload()
    description = body if isinstance(body, str) else ""
    problems += [
        f"{where}: the long description links to {target!r}, which breaks outside the repository"
        for target in relative_links(description)
    ]
    return problems


def project_versions() -> dict[str, Version]:
    """Name -> version of every distribution this script builds."""
    projects = [
        *sorted((REPO / "packages").glob("*/pyproject.toml")),
        *(project / "pyproject.toml" for project in EXTRA_PROJECTS),
    ]
    versions = {}
    for pyproject in projects:
        table = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        versions[canonicalize_name(table["name"])] = Version(table["version"])
    return versions


def check(paths: list[Path]) -> list[str]:
    """Every problem of the archives in ``paths``, twine's included."""
    versions = project_versions()
    expected = {name.replace("-", "_") for name in versions}
    built = {path.name.split("-", 1)[0] for path in paths}
    problems = [f"no archive of {name} was built" for name in sorted(expected - built)]
    for kind in ("*.whl", "*.tar.gz"):
        kinds = {path.name.split("-", 1)[0] for path in paths if path.match(kind)}
        problems += [f"no {kind} of {name}" for name in sorted(expected - kinds)]
    problems += twine_check(paths)
    examples = {
        tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "name"
        ].replace("-", "_")
        for project in EXTRA_PROJECTS
    }
    for path in paths:
        member = path.name.split("-", 1)[0] not in examples
        problems += check_archive(path, versions, for_old_pips=member)
    return problems


def main(argv: list[str]) -> int:
    """Build into ``argv[0]`` (a temporary directory if absent), check, report."""
    with tempfile.TemporaryDirectory(prefix="mango-dists-") as scratch:
        out_dir = Path(argv[0]) if argv else Path(scratch)
        paths = build(out_dir)
        problems = check(paths)
        for path in paths:
            print(f"built {path.name}")
        for problem in problems:
            print(f"PROBLEM: {problem}", file=sys.stderr)
        if problems:
            print(f"check-dists: {len(problems)} problem(s)", file=sys.stderr)
            return 1
        print(f"check-dists: {len(paths)} archives OK")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
