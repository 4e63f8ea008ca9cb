"""The one grammar of memory and CPU sizes, parsed in the domain and refused at the boundary."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.app.converter import converter
from mango.domain import InvalidInput
from mango.domain.hashing import spec_hash
from mango.domain.limits import (
    CPUS_GRAMMAR,
    MAX_MEMORY_BYTES,
    MEMORY_GRAMMAR,
    MemorySize,
    parse_cpus,
)
from mango.domain.values import SandboxSpec

UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def _spellings(prefix: str) -> list[str]:
    """Every spelling of one unit: ``m``, ``mi``, ``mb``, ``mib`` in any case (``b`` for bytes)."""
    bare = ["", "b"] if not prefix else [prefix, prefix + "i", prefix + "b", prefix + "ib"]
    return sorted({form for word in bare for form in (word, word.upper(), word.capitalize())})


@st.composite
def sizes(draw: st.DrawFn) -> tuple[str, int]:
    """A size in the grammar and the bytes it means (at most 1p)."""
    prefix = draw(st.sampled_from(sorted(UNITS)))
    scale = 1024 ** UNITS[prefix]
    whole = draw(st.integers(min_value=0, max_value=MAX_MEMORY_BYTES // scale))
    fraction = draw(st.sampled_from(["", ".5", ".25", ".0"])) if whole < 1024 else ""
    unit = draw(st.sampled_from(_spellings(prefix)))
    space = draw(st.sampled_from(["", " "]))
    number = Decimal(f"{whole}{fraction}")
    expected = int(number * scale)
    if expected == 0 or expected > MAX_MEMORY_BYTES:
        whole, number, expected = 1, Decimal(1), scale
        fraction = ""
    return f"{whole}{fraction}{space}{unit}", expected


@given(sizes())
def test_every_spelling_of_a_size_means_powers_of_1024(case: tuple[str, int]) -> None:
    """Docker's and Kubernetes' spellings alike: k, ki, kb, kib in any case are 1024."""
    text, expected = case
    assert MemorySize.parse(text).bytes == expected
    assert SandboxSpec(memory=text).memory_bytes == expected


@given(sizes())
def test_the_canonical_spelling_means_the_same_size(case: tuple[str, int]) -> None:
    """``str()`` (the number with a Kubernetes suffix) parses back to the same bytes."""
    text, expected = case
    canonical = str(MemorySize.parse(text))
    assert MemorySize.parse(canonical).bytes == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 << 20),  # what Docker users write
        ("2g", 2 << 30),
        ("1.5GiB", 3 << 29),
        ("2Gi", 2 << 30),  # what OpenSandbox (Kubernetes) users write
        ("512Mi", 512 << 20),
        ("2G", 2 << 30),  # binary, as Docker reads it
        ("64MB", 64 << 20),
        ("1p", 1 << 50),
        ("6291456", 6 << 20),
        (" 512 m ", 512 << 20),
    ],
)
def test_sizes_each_provider_accepted_before(text: str, expected: int) -> None:
    """Sizes Docker, OpenSandbox and Daytona took before mean the same bytes now."""
    assert MemorySize.parse(text).bytes == expected


@given(st.integers(min_value=1, max_value=MAX_MEMORY_BYTES))
def test_a_whole_number_is_bytes(size: int) -> None:
    """An int, or its digits, is a number of bytes."""
    assert MemorySize.parse(size).bytes == size
    assert SandboxSpec(memory=size).memory == str(size)
    assert SandboxSpec(memory=str(size)).memory_bytes == size


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "m",
        "lots",
        "12x",
        "-1g",
        "1e9",
        "5ib",
        "2Ei",
        "1.1p",
        "99999999p",
        "0",
        "0m",
        "0.5",
        "1..5g",
    ],
)
def test_a_bad_size_is_invalid_input_naming_the_value_and_the_grammar(bad: str) -> None:
    """Admission refuses it for every provider: the spec cannot even be built."""
    with pytest.raises(InvalidInput) as caught:
        SandboxSpec(memory=bad)
    assert repr(bad) in str(caught.value)
    assert MEMORY_GRAMMAR in str(caught.value)


@pytest.mark.parametrize("bad", [True, 1.5, -1, b"1g", ["1g"]])
def test_a_size_of_another_type_is_invalid_input(bad: object) -> None:
    """Only text and whole numbers of bytes are sizes."""
    with pytest.raises(InvalidInput, match="is not a size"):
        SandboxSpec(memory=bad)  # type: ignore[arg-type]


def test_zero_is_a_size_only_where_a_setting_allows_it() -> None:
    """``0`` means "no limit" to a setting that says so; a spec always states a limit."""
    assert MemorySize.parse("0", allow_zero=True).bytes == 0
    assert MemorySize.parse("0g", allow_zero=True).bytes == 0
    with pytest.raises(InvalidInput, match="less than one byte"):
        MemorySize.parse("0.1", allow_zero=True)


def test_memory_keeps_its_text_so_stored_hashes_still_match() -> None:
    """The spec stores the text as written: its JSON and hash are those of earlier versions."""
    spec = SandboxSpec(memory="512m")
    assert spec.memory == "512m"
    assert converter.unstructure(spec)["memory"] == "512m"
    assert converter.structure(converter.unstructure(spec), SandboxSpec) == spec
    assert spec_hash(spec) != spec_hash(SandboxSpec(memory="512Mi"))  # another request, as before
    assert SandboxSpec(memory="512Mi").memory_bytes == spec.memory_bytes
    assert SandboxSpec().memory_bytes is None
    assert SandboxSpec().memory_size is None


@given(
    st.one_of(
        st.integers(min_value=1, max_value=1024),
        st.floats(min_value=0.001, max_value=1024, allow_nan=False),
    )
)
def test_a_number_of_cpus_is_kept(cpus: float) -> None:
    """Numbers in range pass unchanged (a stored spec keeps its hash)."""
    assert parse_cpus(cpus) == cpus
    assert SandboxSpec(cpus=cpus).cpus == cpus


@given(st.integers(min_value=1, max_value=1024 * 1000))
def test_millicores_are_thousandths_of_a_cpu(millicores: int) -> None:
    """``500m`` is half a CPU, as Kubernetes and OpenSandbox read it."""
    assert parse_cpus(f"{millicores}m") == pytest.approx(millicores / 1000)
    assert SandboxSpec(cpus=f"{millicores}m").cpus == pytest.approx(millicores / 1000)


def test_cpu_text_becomes_its_number() -> None:
    """Text is parsed once, into the number every provider translates."""
    assert SandboxSpec(cpus="1.5").cpus == 1.5
    assert SandboxSpec(cpus=" 250m ").cpus == 0.25
    assert spec_hash(SandboxSpec(cpus="2")) == spec_hash(SandboxSpec(cpus=2))


@pytest.mark.parametrize(
    "bad", [0, -1, 0.0005, 1025, 1e300, float("nan"), float("inf"), True, "", "x", "0.5m", "1e3"]
)
def test_a_bad_cpu_count_is_invalid_input_naming_the_value_and_the_grammar(bad: object) -> None:
    """Out of range, not a number or not finite: refused when the spec is built."""
    with pytest.raises(InvalidInput) as caught:
        SandboxSpec(cpus=bad)  # type: ignore[arg-type]
    assert repr(bad) in str(caught.value)
    assert CPUS_GRAMMAR in str(caught.value)
