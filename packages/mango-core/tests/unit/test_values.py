"""Values validate themselves and raise typed, permanent errors."""

from __future__ import annotations

import pytest

from mango.app.converter import converter
from mango.domain import (
    AdmissionRejected,
    Capability,
    CapabilityNotSupported,
    CapabilitySet,
    Command,
    InvalidInput,
    MangoError,
    NetworkMode,
    OwnershipError,
    PackagePlan,
    PathEscapeError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    admission_reasons,
    admit,
    binding_proves_package_setup,
    binding_spec_hash,
    is_permanent,
    spec_hash,
)


@pytest.mark.parametrize("bad", ["", " x", "x\n", "a" * 256, 3])
def test_bad_session_ids(bad: object) -> None:
    """Empty, padded, non-printable, over-long and non-string ids are refused."""
    from mango.domain import validate_session_id

    with pytest.raises(InvalidInput):
        validate_session_id(bad)


@pytest.mark.parametrize("text", ["", "local", ":x", "Local:x", "local:", "lo cal:x"])
def test_malformed_refs(text: str) -> None:
    """A reference needs a lowercase provider name and a non-empty id."""
    with pytest.raises(InvalidInput):
        SandboxRef.parse(text)


def test_ref_round_trip() -> None:
    """str() and parse() are inverse."""
    ref = SandboxRef("docker", "abc:def")
    assert SandboxRef.parse(str(ref)) == ref


def test_command_validation() -> None:
    """argv must be a non-empty sequence of strings; cwd follows the path rules."""
    with pytest.raises(InvalidInput):
        Command(())
    with pytest.raises(InvalidInput):
        Command("ls -l")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        Command(("x",), env={"1BAD": "v"})
    with pytest.raises(PathEscapeError):
        Command(("ls",), cwd="../up")
    command = Command(["ls"], env={"B": "2", "A": "1"}, cwd="./sub/")
    assert command.argv == ("ls",)
    assert command.env == (("A", "1"), ("B", "2"))
    assert command.cwd == "sub"


def test_spec_validation_and_hash() -> None:
    """Specs reject bad values; the JSON form round-trips and hashes stably."""
    with pytest.raises(InvalidInput):
        SandboxSpec(network="wifi")  # type: ignore[arg-type]
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(InvalidInput):
            SandboxSpec(timeout=bad)
        with pytest.raises(InvalidInput):
            Command(("x",), timeout=bad)
    with pytest.raises(InvalidInput):
        SandboxSpec(pids_limit=1.5)  # type: ignore[arg-type]
    spec = SandboxSpec(
        timeout=30,
        network=NetworkMode.LIMITED,
        network_allowed_hosts=["B.example", "a.example", "a.example"],
        packages=PackagePlan(pip=["attrs"]),
    )
    assert spec.network_allowed_hosts == ("a.example", "b.example")
    stored = converter.structure(converter.unstructure(spec), SandboxSpec)
    assert stored == spec
    assert spec_hash(spec) == spec_hash(stored)
    assert spec_hash(spec) != spec_hash(SandboxSpec())


def test_package_proof() -> None:
    """A binding proves its own plan, survives a network-only change, not a new plan."""
    spec = SandboxSpec(packages=PackagePlan(pip=["attrs"]))
    bound = binding_spec_hash(spec)
    assert binding_proves_package_setup(bound, spec)
    assert binding_proves_package_setup(bound, SandboxSpec(packages=spec.packages, timeout=9))
    assert not binding_proves_package_setup(bound, SandboxSpec(packages=PackagePlan(pip=["x"])))
    assert binding_proves_package_setup(binding_spec_hash(SandboxSpec()), SandboxSpec())


def test_admission_lists_every_reason() -> None:
    """Every reason is reported, and capability gaps get the capability error."""
    spec = SandboxSpec(network=NetworkMode.LIMITED, packages=PackagePlan(apt=["curl"]))
    reasons = admission_reasons("local", CapabilitySet(), spec, [Capability.FILE_RESOURCES])
    assert len(reasons) == 3
    with pytest.raises(CapabilityNotSupported) as info:
        admit("local", CapabilitySet(), spec, [Capability.FILE_RESOURCES])
    assert len(info.value.reasons) == 3
    assert is_permanent(info.value)
    with pytest.raises(AdmissionRejected) as plain:
        admit("x", CapabilitySet(), SandboxSpec(network_allowed_hosts=["a.example"]))
    assert not isinstance(plain.value, CapabilityNotSupported)
    full = CapabilitySet(list(Capability))
    admit("x", full, spec, [Capability.FILE_RESOURCES])


def test_is_permanent_follows_explicit_causes_only() -> None:
    """Wrapped permanent errors stay permanent; the first MangoError decides."""
    try:
        try:
            raise OwnershipError("not yours")
        except OwnershipError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_permanent(outer)
    try:
        try:
            raise OwnershipError("not yours")
        except OwnershipError:
            raise ProviderUnavailable("network down")  # noqa: B904 - implicit context on purpose
    except ProviderUnavailable as exc:
        assert not is_permanent(exc)
    assert not is_permanent(SandboxNotFound("gone"))
    assert not is_permanent(ValueError())
    assert isinstance(SandboxNotFound("x"), MangoError)
