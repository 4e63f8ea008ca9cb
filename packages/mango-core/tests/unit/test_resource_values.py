"""The pure rules of File Resource mounts and Session outputs: paths, names, limits."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.domain import SandboxSpec
from mango.domain.capabilities import Capability, admit
from mango.domain.errors import (
    CapabilityNotSupported,
    InvalidInput,
    InvalidPathError,
    OutputRejected,
    PathEscapeError,
)
from mango.domain.outputs import output_filename, output_path, printable_name
from mango.domain.resources import (
    UPLOADS_ROOT,
    FileResourceMount,
    check_mount_path,
    default_mount_path,
    overlapping_paths,
    resolve_mount_path,
    validate_identity,
    validate_resource_id,
)
from mango.plugins.manager import load_plugins

FILE_ID = "file-" + "a" * 32
DIGEST = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, f"{UPLOADS_ROOT}/{FILE_ID}"),
        ("", f"{UPLOADS_ROOT}/{FILE_ID}"),
        ("data.csv", f"{UPLOADS_ROOT}/data.csv"),
        ("a//b/./c.txt", f"{UPLOADS_ROOT}/a/b/c.txt"),
        ("/data/x.csv", f"{UPLOADS_ROOT}/data/x.csv"),
        (f"{UPLOADS_ROOT}/in/place.txt", f"{UPLOADS_ROOT}/in/place.txt"),
        ("/mnt/session/outputs/x", f"{UPLOADS_ROOT}/mnt/session/outputs/x"),
    ],
)
def test_mount_paths_default_and_are_rerooted_below_the_uploads(
    given: str | None, expected: str
) -> None:
    """No path is the file id below uploads; any other lands below uploads."""
    assert resolve_mount_path(FILE_ID, given) == expected


@pytest.mark.parametrize("bad", ["../x", "a/../b", "/mnt/session/uploads/../escape", "..", "a/.."])
def test_dotdot_is_refused_never_folded(bad: str) -> None:
    """``..`` anywhere is a PathEscapeError (InvalidInput), even one that would stay inside."""
    with pytest.raises(PathEscapeError, match=r"'\.\.'"):
        resolve_mount_path(FILE_ID, bad)


@pytest.mark.parametrize(
    "bad", ["a\nb", "tab\there", "x" * 256, "/".join(["y" * 200] * 6), UPLOADS_ROOT, "/", "\udcff"]
)
def test_malformed_mount_paths_are_invalid_input(bad: str) -> None:
    """Control characters, long components or paths, the root itself, bad UTF-8: refused."""
    with pytest.raises(InvalidInput):
        resolve_mount_path(FILE_ID, bad)


def test_the_providers_rule_takes_normal_paths_strictly_below_uploads_only() -> None:
    """``check_mount_path`` re-roots nothing and folds nothing."""
    assert check_mount_path(f"{UPLOADS_ROOT}/a/b") == f"{UPLOADS_ROOT}/a/b"
    for bad in (
        UPLOADS_ROOT,
        f"{UPLOADS_ROOT}/",
        f"{UPLOADS_ROOT}//a",
        "a",
        "/mnt/x",
        f"{UPLOADS_ROOT}x/y",
    ):
        with pytest.raises(InvalidPathError):
            check_mount_path(bad)
    with pytest.raises(PathEscapeError):
        check_mount_path(f"{UPLOADS_ROOT}/../escape")


def test_overlap_is_equality_or_nesting_not_a_shared_prefix() -> None:
    """``a`` overlaps ``a`` and ``a/b``, not ``ab``."""
    base = f"{UPLOADS_ROOT}/a"
    existing = [base, f"{UPLOADS_ROOT}/ab", f"{UPLOADS_ROOT}/c/d"]
    assert overlapping_paths(existing, base) == [base]
    assert overlapping_paths(existing, f"{base}/deeper") == [base]
    assert overlapping_paths(existing, f"{UPLOADS_ROOT}/c") == [f"{UPLOADS_ROOT}/c/d"]
    assert overlapping_paths(existing, f"{UPLOADS_ROOT}/abc") == []


def test_mount_values_are_checked_when_built() -> None:
    """A mount with a bad identity, path, size or digest is InvalidInput before any call."""
    good = FileResourceMount("res-" + "0" * 32, f"{UPLOADS_ROOT}/f", 1, DIGEST)
    assert good.relative_path == "f"
    for fields in (
        {"identity": ""},
        {"identity": "a\nb"},
        {"runtime_path": "/etc/passwd"},
        {"size": -1},
        {"size": True},
        {"sha256": "A" * 64},
    ):
        values = {"identity": good.identity, "runtime_path": good.runtime_path, "size": 1}
        values["sha256"] = DIGEST
        values.update(fields)
        with pytest.raises(InvalidInput):
            FileResourceMount(**values)  # type: ignore[arg-type]
    assert default_mount_path(FILE_ID).endswith(FILE_ID)
    with pytest.raises(InvalidInput):
        validate_resource_id("res-xyz")
    assert validate_identity("sesrsc_first") == "sesrsc_first"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("./a.txt", "a.txt"),
        ("././nested/./b", "nested/b"),
        ("dir/", "dir"),
        (".", None),
        ("./", None),
        ("a//b", "a/b"),
    ],
)
def test_archive_names_normalise(name: str, expected: str | None) -> None:
    """Leading ``./``, trailing ``/`` and ``.`` components go; the root is None."""
    assert output_path(name) == expected


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/etc/passwd", "absolute"),
        ("../up", r"'\.\.'"),
        ("a/../../b", r"'\.\.'"),
        ("new\nline", "control character"),
        ("bad-\udcff-utf8", "UTF-8"),
        ("x" * 256, "255 bytes"),
        ("/".join(["y" * 250] * 5), "1024 bytes"),
    ],
)
def test_hostile_archive_names_are_rejected_naming_them(name: str, why: str) -> None:
    """Each refusal is an OutputRejected whose path field names the entry printably."""
    with pytest.raises(OutputRejected, match=why) as raised:
        output_path(name)
    assert raised.value.path == printable_name(name)
    assert raised.value.permanent
    raised.value.path.encode("utf-8")  # always printable, so it can cross any boundary


@given(st.text(min_size=1, max_size=400))
def test_output_filenames_are_always_valid_names(path: str) -> None:
    """Whatever the path, the stored file's name is a valid, bounded name."""
    from mango.domain.files import validate_filename

    try:
        normal = output_path(path)
    except OutputRejected:
        return
    if normal is None:
        return
    name = output_filename(normal)
    assert validate_filename(name) == name


def test_long_output_filenames_stay_distinct() -> None:
    """Two long paths that share a prefix get different names."""
    first, second = "d/" + "x" * 300 + "1", "d/" + "x" * 300 + "2"
    assert output_filename(first) != output_filename(second)
    assert len(output_filename(first).encode()) <= 255
    assert output_filename("nested/report.txt") == "nested__report.txt"
    assert output_filename('a<b>:c"d|e?f*g\\h') == "a_b__c_d_e_f_g_h"


def test_every_installed_provider_but_docker_refuses_resources_at_admission() -> None:
    """Local and every remote provider refuse the three resource capabilities; Docker admits.

    Read from the registrations the plugins make (the declarations admission uses).
    """
    registry = load_plugins(entry_points=True).providers()
    names = set(registry.names())
    assert {"local", "docker", "e2b", "cube", "opensandbox", "daytona"} <= names
    wanted = (Capability.FILE_RESOURCES, Capability.SESSION_OUTPUTS, Capability.SKILL_BUNDLES)
    admit("docker", registry.capabilities("docker"), SandboxSpec(), wanted)
    for name in sorted(names - {"docker"}):
        with pytest.raises(CapabilityNotSupported) as refused:
            admit(name, registry.capabilities(name), SandboxSpec(), wanted)
        assert refused.value.reasons == (
            f"{name} does not support file resource mounts",
            f"{name} does not support session output mounts",
            f"{name} does not support skill bundle mounts",
        ), name
