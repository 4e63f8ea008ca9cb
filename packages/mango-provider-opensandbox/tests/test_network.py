"""Egress policy: created deny-by-default, reconciled by hash through the sidecar."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mango.provider import NetworkMode, PermanentError, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.network import create_policy, policy_hash

LIMITED = SandboxSpec(
    timeout=60, network=NetworkMode.LIMITED, network_allowed_hosts=("a.example.test",)
)


def test_create_policies_per_network_mode() -> None:
    """none: deny with no rule; limited: deny plus the allowlist; bridge: no policy."""
    assert create_policy(SandboxSpec()) == {"defaultAction": "deny", "egress": []}
    assert create_policy(LIMITED) == {
        "defaultAction": "deny",
        "egress": [{"action": "allow", "target": "a.example.test"}],
    }
    assert create_policy(SandboxSpec(network=NetworkMode.BRIDGE)) is None
    assert policy_hash(["B.example.test", "a.example.test"]) == policy_hash(
        ["a.example.test", "b.example.test", "a.example.test"]
    )


def _allowed(fake: FakeOpenSandbox, sandbox_id: str) -> list[tuple[str, str]]:
    policy = fake.policy(sandbox_id)
    assert policy is not None
    return [(rule["action"], rule["target"]) for rule in policy["egress"]]


async def test_apply_replaces_the_allowlist_and_is_idempotent(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """A new list replaces the allow rules; the same list again costs one read, no change."""
    sandbox = await make_provider().create("net-apply", LIMITED)
    sandbox_id = sandbox.ref.external_id
    assert _allowed(fake, sandbox_id) == [("allow", "a.example.test")]
    await sandbox.apply_limited_network(["b.example.test", "*.c.example.test"])
    assert sorted(_allowed(fake, sandbox_id)) == [
        ("allow", "*.c.example.test"),
        ("allow", "b.example.test"),
    ]
    writes = fake.faults.count("PATCH") + fake.faults.count("DELETE")
    await sandbox.apply_limited_network(["*.c.example.test", "b.example.test"])
    assert fake.faults.count("PATCH") + fake.faults.count("DELETE") == writes
    await sandbox.apply_limited_network([])
    assert _allowed(fake, sandbox_id) == []
    assert fake.policy(sandbox_id)["defaultAction"] == "deny"  # type: ignore[index]


async def test_drift_is_repaired_and_deny_rules_stay(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """Someone else's allow rule goes, a desired host overrides a deny rule, other denies stay."""
    sandbox = await make_provider().create("net-drift", LIMITED)
    sandbox_id = sandbox.ref.external_id
    fake.set_policy(
        sandbox_id,
        {
            "defaultAction": "deny",
            "egress": [
                {"action": "allow", "target": "evil.example.test"},
                {"action": "deny", "target": "a.example.test"},
                {"action": "deny", "target": "other.example.test"},
            ],
        },
    )
    await sandbox.apply_limited_network(["a.example.test"])
    assert _allowed(fake, sandbox_id) == [
        ("allow", "a.example.test"),
        ("deny", "other.example.test"),
    ]


async def test_a_permissive_sandbox_is_never_widened(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """No policy (bridge) or allow-by-default: applying an allowlist is a permanent error."""
    provider = make_provider()
    bridge = await provider.create("net-bridge", SandboxSpec(network=NetworkMode.BRIDGE))
    with pytest.raises(PermanentError):
        await bridge.apply_limited_network(["a.example.test"])
    limited = await provider.create("net-open", LIMITED)
    fake.set_policy(limited.ref.external_id, {"defaultAction": "allow", "egress": []})
    with pytest.raises(PermanentError):
        await limited.apply_limited_network(["a.example.test"])
