"""Versioned, canonical spec hashes: stability, golden values, v1 compatibility."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.app.converter import converter
from mango.domain import NetworkMode, PackagePlan, SandboxSpec
from mango.domain.hashing import (
    SPEC_HASH_PREFIX,
    _canonical,
    _sha256,
    binding_proves_package_setup,
    binding_spec_hash,
    canonical_form,
    package_plan_hash,
    spec_hash,
    spec_hash_matches,
)

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0-", min_size=1, max_size=8)
_HOSTS = st.from_regex(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\.[a-z]{1,4})?", fullmatch=True)
"""Allowlist entries: host names and wildcards that pass the host rule."""
_NUMBER = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=10_000),
    st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False),
)
_CPUS = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=1024),
    st.floats(min_value=0.001, max_value=1024, allow_nan=False, allow_infinity=False),
)
"""CPU counts inside the grammar (0.001 to 1024)."""
PLANS = st.builds(
    PackagePlan,
    apt=st.lists(_NAMES, max_size=3),
    cargo=st.lists(_NAMES, max_size=2),
    gem=st.lists(_NAMES, max_size=2),
    go=st.lists(_NAMES, max_size=2),
    npm=st.lists(_NAMES, max_size=2),
    pip=st.lists(_NAMES, max_size=3),
)
SPECS = st.builds(
    SandboxSpec,
    timeout=_NUMBER,
    image=st.one_of(st.none(), _NAMES),
    memory=st.one_of(st.none(), st.sampled_from(["256m", "1g"])),
    cpus=_CPUS,
    network=st.sampled_from(list(NetworkMode)),
    pids_limit=st.one_of(st.none(), st.integers(min_value=1, max_value=4096)),
    network_allowed_hosts=st.lists(_HOSTS, max_size=3),
    setup_network_allowed_hosts=st.lists(_HOSTS, max_size=3),
    packages=PLANS,
)


@attrs.frozen
class EvolvedPlan(PackagePlan):
    """PackagePlan as a later release might define it: one more optional manager."""

    conda: tuple[str, ...] = ()


@attrs.frozen
class EvolvedSpec(SandboxSpec):
    """SandboxSpec as a later release might define it: new optional fields with defaults."""

    gpus: int | None = None
    labels: tuple[str, ...] = ()
    read_only: bool = False


def _evolve(spec: SandboxSpec) -> EvolvedSpec:
    plan = EvolvedPlan(**attrs.asdict(spec.packages, recurse=False))
    fields = attrs.asdict(spec, recurse=False)
    fields["packages"] = plan
    return EvolvedSpec(**fields)


def _v2_of(value: Any) -> str:
    return SPEC_HASH_PREFIX + _sha256(_canonical(canonical_form(value)))


@given(SPECS)
def test_new_optional_fields_at_default_keep_the_v2_hash(spec: SandboxSpec) -> None:
    """Adding optional fields (spec and plan) at their default changes no v2 hash."""
    evolved = _evolve(spec)
    assert _v2_of(evolved) == spec_hash(spec)
    assert _v2_of(evolved.packages) == package_plan_hash(spec.packages)
    assert spec_hash_matches(spec_hash(spec), evolved)
    # A v1 hash is still recognised for a spec that leaves the new fields unset ...
    assert binding_proves_package_setup(binding_spec_hash(spec), evolved)


@given(SPECS)
def test_a_new_field_set_to_a_non_default_changes_the_hash(spec: SandboxSpec) -> None:
    """The hash still distinguishes specs once the new field is actually used."""
    evolved = attrs.evolve(_evolve(spec), gpus=2)
    assert _v2_of(evolved) != spec_hash(spec)
    assert not spec_hash_matches(spec_hash(spec), evolved)
    assert not spec_hash_matches(
        V1_TIMEOUT_30, attrs.evolve(_evolve(SandboxSpec(timeout=30)), gpus=1)
    )


@given(SPECS)
def test_round_trip_through_json_keeps_the_hash(spec: SandboxSpec) -> None:
    """The spec stored as JSON with an intent (the edge converter's document) hashes the same."""
    stored = json.loads(json.dumps(converter.unstructure(spec)))
    assert stored == canonical_form(spec)
    assert spec_hash(converter.structure(stored, SandboxSpec)) == spec_hash(spec)


def test_canonical_form_omits_defaults_and_normalises_numbers() -> None:
    """Defaults vanish, integral floats become integers, enums their values, sets sorted."""
    assert canonical_form(SandboxSpec()) == {}
    assert canonical_form(SandboxSpec(timeout=30.0, network="bridge")) == {
        "timeout": 30,
        "network": "bridge",
    }
    assert spec_hash(SandboxSpec(timeout=30)) == spec_hash(SandboxSpec(timeout=30.0))
    assert canonical_form(SandboxSpec(packages=PackagePlan(pip=["b", "a"]))) == {
        "packages": {"pip": ["b", "a"]}  # install order is kept: it is passed verbatim
    }
    assert canonical_form(frozenset({"b", "a"})) == ["a", "b"]
    with pytest.raises(TypeError):
        canonical_form(object())


# Golden values. v1 was computed by the code of commit ccb5047 (attrs.asdict of the
# whole spec); a change here means stored intents and bindings stop matching.
V1_TIMEOUT_30 = "sha256:2ca30ec2461f0d5fffededaf72826cfbcf9b79281ebf78596bcbf3feeb9e634b"
V1_EMPTY_PLAN = "sha256:3e9263cedc7d65fa426e184c6ccb7dfe9875a26b0718a487a94d0ccae185b325"
DOCKER = SandboxSpec(
    timeout=30.0,
    image="python:3.12-slim",
    memory="512m",
    cpus=1.5,
    network="limited",
    pids_limit=256,
    network_allowed_hosts=("Pkgs.Example.test", "files.example.test"),
)
WITH_PACKAGES = SandboxSpec(
    image="debian:bookworm",
    network="bridge",
    setup_network_allowed_hosts=("apt.example.test",),
    packages=PackagePlan(apt=("curl", "git"), pip=("requests",)),
)
GOLDEN = [
    (
        SandboxSpec(),
        "sha256:e94c4e5063f034ef9f92e0d0e6d4116de7befe5d383cf3293b86725693b9676d",
        "sha256v2:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    ),
    (
        SandboxSpec(timeout=30),
        V1_TIMEOUT_30,
        "sha256v2:2e134e47e356ce08bffed9fc79e7f38fa3b38ef0d3812f182202731896133dc4",
    ),
    (
        DOCKER,
        "sha256:2d2a925b7b4ca32417a98eea22af3e89267258a9700474bfc3f7086c3542473e",
        "sha256v2:3ae458747d2e1bc7cf42f5725d0d9d8aaf313d868754dc7c05cf3e562ad17488",
    ),
    (
        WITH_PACKAGES,
        "sha256:e9e73b6d52ebc759f363183e7b32b9afc035845a8ecc109691d0d4df072652c7",
        "sha256v2:b9ce966100c52ef617f32e703bd82ef12bb4f7aaaf6d4275e022e9eb6c35876f",
    ),
]


@pytest.mark.parametrize(("spec", "v1", "v2"), GOLDEN)
def test_golden_hashes(spec: SandboxSpec, v1: str, v2: str) -> None:
    """v2 is pinned, and both v1 and v2 hashes of the spec are recognised."""
    assert spec_hash(spec) == v2
    assert spec_hash_matches(v2, spec)
    assert spec_hash_matches(v1, spec)
    other = attrs.evolve(spec, memory="3g")
    assert not spec_hash_matches(v1, other)
    assert not spec_hash_matches(v2, other)


def test_unknown_versions_never_match() -> None:
    """A hash of an unknown version is treated as another spec."""
    digest = spec_hash(SandboxSpec()).partition(":")[2]
    assert not spec_hash_matches("sha512:" + digest, SandboxSpec())
    assert not spec_hash_matches("", SandboxSpec())


def test_v1_binding_hashes_still_prove_package_setup() -> None:
    """Bindings written by v1 (with or without the package suffix) keep proving their plan."""
    v1_binding = (
        "sha256:e9e73b6d52ebc759f363183e7b32b9afc035845a8ecc109691d0d4df072652c7"
        "|packages=sha256:b4bf765c538b7292f74006d5b0967619583b5f77609871a06b17bf4120046a7b"
    )
    assert binding_proves_package_setup(v1_binding, WITH_PACKAGES)
    assert binding_proves_package_setup(v1_binding, attrs.evolve(WITH_PACKAGES, timeout=5))
    changed = attrs.evolve(WITH_PACKAGES, packages=PackagePlan(apt=("curl",)))
    assert not binding_proves_package_setup(v1_binding, changed)
    legacy = "sha256:e9e73b6d52ebc759f363183e7b32b9afc035845a8ecc109691d0d4df072652c7"
    assert binding_proves_package_setup(legacy, WITH_PACKAGES)
    assert not binding_proves_package_setup(legacy, attrs.evolve(WITH_PACKAGES, timeout=5))
    assert binding_proves_package_setup(V1_TIMEOUT_30 + "|packages=" + V1_EMPTY_PLAN, SandboxSpec())


def test_v1_hashes_match_either_spelling_of_an_integral_number() -> None:
    """v1 hashed 30 and 30.0 apart; read back through the converter, both are recognised."""
    as_int, as_float = SandboxSpec(timeout=30), SandboxSpec(timeout=30.0)
    assert spec_hash_matches(V1_TIMEOUT_30, as_int)
    assert spec_hash_matches(V1_TIMEOUT_30, as_float)
    read_back = converter.structure(converter.unstructure(as_int), SandboxSpec)
    assert spec_hash_matches(V1_TIMEOUT_30, read_back)
    docker_v1 = GOLDEN[2][1]  # hashed over timeout=30.0 and cpus=1.5
    assert spec_hash_matches(docker_v1, attrs.evolve(DOCKER, timeout=30))
    assert not spec_hash_matches(docker_v1, attrs.evolve(DOCKER, timeout=30, cpus=1))
    assert not spec_hash_matches(V1_TIMEOUT_30, SandboxSpec(timeout=30.5))
    assert not spec_hash_matches(V1_TIMEOUT_30, SandboxSpec(timeout=30, cpus=2))
