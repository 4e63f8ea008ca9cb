"""Egress policy: created deny-by-default, reconciled by hash, enforced by the fake's gateway."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from mango.provider import Command, NetworkMode, PermanentError, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox
from mango_provider_opensandbox.fake.gateway import egress_allows
from mango_provider_opensandbox.fake.upstream import UpstreamHosts
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


def test_the_fake_gateway_evaluates_like_the_sidecar() -> None:
    """First matching rule wins, ``*.x`` matches names under x but not x, else the default."""
    policy = {
        "defaultAction": "deny",
        "egress": [
            {"action": "deny", "target": "bad.example.test"},
            {"action": "allow", "target": "*.example.test"},
            {"action": "allow", "target": "Exact.Other.test"},
        ],
    }
    assert egress_allows(policy, "a.example.test")
    assert egress_allows(policy, "deep.a.example.test.")
    assert not egress_allows(policy, "bad.example.test")
    assert not egress_allows(policy, "example.test")
    assert egress_allows(policy, "exact.other.test")
    assert not egress_allows(policy, "sub.exact.other.test")
    assert egress_allows({"defaultAction": "allow", "egress": []}, "anything.test")
    assert egress_allows(None, "anything.test")  # no sidecar: unrestricted


async def test_fake_sandboxes_reach_only_what_their_policy_allows(
    make_provider: Callable[..., OpenSandboxProvider], fake: FakeOpenSandbox
) -> None:
    """A command's HTTP goes through the gateway: allowed names answer, denied ones do not."""
    async with UpstreamHosts(pages={"a.example.test": "tok-a"}) as upstream:
        fake.upstream["a.example.test"] = "127.0.0.1"
        sandbox = await make_provider().create("net-gw", LIMITED)
        url = upstream.url("a.example.test") + "/"
        fetch = Command(("sh", "-c", 'wget -q -T 5 -O - "$1" || printf blocked', "sh", url))
        assert (await sandbox.exec(fetch)).stdout == b"tok-a"
        await sandbox.apply_limited_network(["b.example.test"])
        assert (await sandbox.exec(fetch)).stdout == b"blocked"
        fake.set_policy(sandbox.ref.external_id, {"defaultAction": "allow", "egress": []})
        assert (await sandbox.exec(fetch)).stdout == b"tok-a"


async def test_the_fake_image_apt_needs_update_and_installs_all_or_nothing(
    make_provider: Callable[..., OpenSandboxProvider], fake: FakeOpenSandbox
) -> None:
    """install before update locates nothing; a missing name installs nothing; then all."""
    async with UpstreamHosts(mirrors={"mirror.example.test": ("tool-one", "tool-two")}) as up:
        fake.upstream["mirror.example.test"] = "127.0.0.1"
        fake.apt_source = up.url("mirror.example.test")
        spec = attrs.evolve(LIMITED, network_allowed_hosts=("mirror.example.test",))
        sandbox = await make_provider().create("apt", spec)

        async def sh(line: str) -> tuple[int, bytes]:
            result = await sandbox.exec(Command(("sh", "-c", line)))
            return result.exit_code, result.stdout + result.stderr

        assert await sh("apt-get install -y tool-one") == (
            100,
            b"E: Unable to locate package tool-one\n",
        )
        assert (await sh("apt-get update"))[0] == 0
        code, output = await sh("apt-get install -y tool-one nope")
        assert (code, output) == (100, b"E: Unable to locate package nope\n")
        assert await sh("command -v tool-one || printf absent") == (0, b"absent")
        assert (await sh("apt-get install -y --no-install-recommends tool-one tool-two"))[0] == 0
        assert await sh("tool-one && tool-two") == (0, b"tool-one\ntool-two\n")
