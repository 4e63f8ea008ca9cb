"""The ownership kit: labels, deterministic names, selectors and checks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mango.provider import InvalidInput, OwnershipError
from mango.provider.hostdirs import DELETING_MARK, ensure_private_dir, remove_dir
from mango.provider.ownership import (
    LABEL_MANAGED,
    LABEL_NAMESPACE,
    LABEL_SESSION,
    Ownership,
    derived_namespace,
)

KEY = "session-1"
OURS = Ownership("docker", "team-a")


def test_labels_follow_the_reference_plus_namespace() -> None:
    """managed=true, the namespace, and the first 16 bytes of sha256(key) as 32 hex."""
    expected_hash = hashlib.sha256(KEY.encode()).hexdigest()[:32]
    assert OURS.labels(KEY) == {
        "io.mango.managed": "true",
        "io.mango.namespace": "team-a",
        "io.mango.session_key": expected_hash,
    }
    assert Ownership.session_hash(KEY) == expected_hash
    assert KEY not in repr(OURS.labels(KEY))


def test_name_is_deterministic_and_carries_provider_and_namespace() -> None:
    """mango- + hex(sha256(provider NUL namespace NUL key)[:16]); 38 characters."""
    digest = hashlib.sha256(b"docker\0team-a\0" + KEY.encode()).hexdigest()[:32]
    assert OURS.name(KEY) == "mango-" + digest
    assert len(OURS.name(KEY)) == 38
    assert OURS.name(KEY) == Ownership("docker", "team-a").name(KEY)
    assert OURS.name(KEY) != Ownership("docker", "team-b").name(KEY)
    assert OURS.name(KEY) != Ownership("daytona", "team-a").name(KEY)
    assert OURS.name(KEY) != OURS.name("session-2")


def test_selector_selects_the_namespace_only() -> None:
    """The selector is the managed and namespace labels, a subset of every label set."""
    assert OURS.selector() == {LABEL_MANAGED: "true", LABEL_NAMESPACE: "team-a"}
    assert OURS.selector().items() <= OURS.labels(KEY).items()


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (None, "unmanaged"),
        ({}, "unmanaged"),
        ({LABEL_MANAGED: "yes"}, "unmanaged"),
        (Ownership("docker", "team-b").labels(KEY), "belongs to another deployment"),
        ({**OURS.labels(KEY), LABEL_NAMESPACE: ""}, "belongs to another deployment"),
        (OURS.labels("session-2"), "belongs to another session"),
        ({**OURS.labels(KEY), LABEL_SESSION: None}, "belongs to another session"),
    ],
)
def test_check_refuses_with_a_clear_reason(labels: dict[str, str] | None, message: str) -> None:
    """Each way of not owning a resource is an OwnershipError that says which one."""
    with pytest.raises(OwnershipError, match=message) as info:
        OURS.check(labels, KEY, what="docker container x")
    assert "docker container x" in str(info.value)


def test_check_accepts_the_owners_labels_with_extras() -> None:
    """Extra labels (a test run's, a user's) do not disturb the check."""
    OURS.check({**OURS.labels(KEY), "io.mango.test-run": "1"}, KEY, what="x")


def test_owned_hash_is_for_listings() -> None:
    """Our resources give their session hash; anything else gives None, never an error."""
    assert OURS.owned_hash(OURS.labels(KEY)) == Ownership.session_hash(KEY)
    assert OURS.owned_hash(Ownership("docker", "team-b").labels(KEY)) is None
    assert OURS.owned_hash({**OURS.labels(KEY), LABEL_MANAGED: "false"}) is None
    assert OURS.owned_hash({**OURS.labels(KEY), LABEL_SESSION: "not-a-hash"}) is None
    assert OURS.owned_hash(None) is None


def test_reserved_names_the_ownership_labels() -> None:
    """Extra labels may be checked against the ownership labels."""
    assert Ownership.reserved({LABEL_SESSION: "x", "other": "y"}) == frozenset({LABEL_SESSION})


@pytest.mark.parametrize(
    ("provider", "namespace"),
    [("Docker", "ns"), ("docker", ""), ("docker", "-ns"), ("docker", "NS"), ("docker", "a" * 33)],
)
def test_invalid_provider_or_namespace(provider: str, namespace: str) -> None:
    """Names and namespaces are validated when the rules are built."""
    with pytest.raises(InvalidInput):
        Ownership(provider, namespace)


def test_empty_session_key_is_refused() -> None:
    """No label or name exists for an empty key."""
    with pytest.raises(InvalidInput):
        OURS.name("")
    with pytest.raises(InvalidInput):
        OURS.labels("")


def test_derived_namespace_is_stable_and_valid() -> None:
    """The same seed gives the same valid namespace; another seed another."""
    one = derived_namespace("conformance", "/tmp/a")
    assert one == derived_namespace("conformance", "/tmp/a")
    assert one != derived_namespace("conformance", "/tmp/b")
    assert Ownership("local", one).namespace == one


def test_private_dirs_are_removed_crash_safely(tmp_path: Path) -> None:
    """ensure_private_dir makes a 0700 dir; remove_dir also finishes leftovers; idempotent."""
    made = ensure_private_dir(tmp_path / "base", "mango-x", setting="SOME_DIR")
    assert made.stat().st_mode & 0o777 == 0o700
    (made / "locked").mkdir()
    (made / "locked" / "f").write_text("x")
    (made / "locked").chmod(0)
    leftover = made.with_name("mango-x" + DELETING_MARK + "0123")
    leftover.mkdir()
    remove_dir(made)
    assert list((tmp_path / "base").iterdir()) == []
    remove_dir(made)
