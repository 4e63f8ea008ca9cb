"""The one edge converter: the spec's canonical document, strict refusals, typed errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import cattrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.app.converter import converter, strict_converter, structure
from mango.domain import InvalidInput, NetworkMode, PackagePlan, SandboxSpec, SessionRecord
from mango.domain.hashing import canonical_form, spec_hash

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0-", min_size=1, max_size=8)
_HOSTS = st.from_regex(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\.[a-z]{1,4})?", fullmatch=True)
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
SPECS = st.builds(
    SandboxSpec,
    timeout=_NUMBER,
    image=st.one_of(st.none(), _NAMES),
    cpus=_CPUS,
    network=st.sampled_from(list(NetworkMode)),
    pids_limit=st.one_of(st.none(), st.integers(min_value=1, max_value=4096)),
    network_allowed_hosts=st.lists(_HOSTS, max_size=3),
    packages=st.builds(PackagePlan, apt=st.lists(_NAMES, max_size=3)),
)


@given(SPECS)
def test_the_spec_document_is_the_hash_input(spec: SandboxSpec) -> None:
    """The converter writes a spec as the canonical form its hash is computed from."""
    assert converter.unstructure(spec) == canonical_form(spec)


@given(SPECS)
def test_a_spec_reads_back_equal_with_the_same_hash(spec: SandboxSpec) -> None:
    """Stored and read back (an intent row, a payload), a spec is equal and hashes the same."""
    again = structure(converter.unstructure(spec), SandboxSpec, what="a spec", path="spec")
    assert again == spec
    assert spec_hash(again) == spec_hash(spec)


def test_a_full_document_of_an_earlier_release_reads_back() -> None:
    """Every field written out (what intents stored before) is the same spec."""
    spec = SandboxSpec(timeout=30, network="limited", network_allowed_hosts=("a.example",))
    full = attrs.asdict(spec)
    full["network"] = "limited"
    full["network_allowed_hosts"] = ["a.example"]
    assert structure(full, SandboxSpec, what="a spec", path="spec") == spec


def test_every_field_at_fault_is_named() -> None:
    """One InvalidInput lists each unknown, wrong-typed and invalid field with its path."""
    document = {
        "timeout": "30",
        "image": 3,
        "packages": {"apt": "curl", "conda": ["x"]},
        "gpus": 1,
    }
    with pytest.raises(InvalidInput) as caught:
        structure(document, SandboxSpec, what="a stored spec", path="row.spec")
    message = str(caught.value)
    assert message.startswith("a stored spec is not valid: ")
    for problem in (
        "expected float, got str @ row.spec.timeout",
        "expected str, got int @ row.spec.image",
        "expected a list, got str @ row.spec.packages.apt",
        "extra fields found (conda) @ row.spec.packages",
        "extra fields found (gpus) @ row.spec",
    ):
        assert problem in message


def test_validators_run_and_their_message_is_kept() -> None:
    """A value of the right type that a validator refuses keeps the validator's message."""
    with pytest.raises(InvalidInput, match="timeout must be a finite positive number"):
        structure({"timeout": -1}, SandboxSpec, what="a spec", path="spec")


def test_times_are_utc_from_a_row_or_from_text() -> None:
    """A row's aware datetime and ISO text both become UTC; a time without a zone is refused."""
    east = timezone(timedelta(hours=2))
    row = {"session_id": "s", "created_at": datetime(2026, 1, 1, 12, tzinfo=east)}
    record = structure(row, SessionRecord, what="a session row", path="row")
    assert record.created_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert record.created_at.tzinfo is UTC
    text = {"session_id": "s", "created_at": "2026-01-01T12:00:00+02:00", "deleting_at": None}
    assert structure(text, SessionRecord, what="a session", path="row") == record
    naive = {
        "session_id": "s",
        "created_at": datetime(2026, 1, 1, 12, tzinfo=UTC).replace(tzinfo=None),
    }
    with pytest.raises(InvalidInput, match=r"time with a time zone, got .* @ row\.created_at"):
        structure(naive, SessionRecord, what="a session row", path="row")
    assert converter.unstructure(record)["created_at"] == "2026-01-01T10:00:00+00:00"


@attrs.frozen
class _Args:
    name: str
    count: int = 1
    tags: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"name": "x", "extra": 1}, "extra fields found (extra)"),
        ({"name": 1}, "expected str, got int"),
        ({"name": "x", "count": 1.5}, "expected int, got float"),
        ({"name": "x", "count": "1"}, "expected int, got str"),
        ({"name": "x", "tags": "ab"}, "expected a list, got str"),
    ],
)
def test_the_strict_variant_refuses_what_a_model_may_get_wrong(
    document: dict[str, object], problem: str
) -> None:
    """Tool arguments: nothing unknown and nothing coerced."""
    with pytest.raises(InvalidInput, match="arguments") as caught:
        structure(document, _Args, what="arguments", path="arguments", using=strict_converter)
    assert problem in str(caught.value)


def test_the_strict_variant_knows_no_wire_encodings() -> None:
    """Base85 bytes and ISO timestamps are mango's own encodings, not what a model writes."""
    assert converter.unstructure(b"hello") == "Xk~0{Zv"
    assert converter.structure("Xk~0{Zv", bytes) == b"hello"
    with pytest.raises(InvalidInput):
        structure("Xk~0{Zv", bytes, what="arguments", path="arguments", using=strict_converter)
    with pytest.raises(cattrs.StructureHandlerNotFoundError):
        strict_converter.structure("2026-01-01T00:00:00+00:00", datetime)
