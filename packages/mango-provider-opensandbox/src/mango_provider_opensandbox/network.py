"""Network policy: what a sandbox is created with, and reconciling an egress allowlist.

* ``none`` -> ``{"defaultAction": "deny", "egress": []}``: no egress at all;
* ``limited`` -> deny by default, one ``allow`` rule per allowlisted host;
* ``bridge`` -> no policy: no egress sidecar, unrestricted.

:func:`reconcile` makes the sidecar's *allow* rules equal a desired list
without ever widening a sandbox that is not deny-by-default: it reads the
policy, compares a hash of its allow rules with the desired list's, and only
on a difference removes what is not desired (one ``DELETE``) and adds what
is missing (one ``PATCH``). Deny rules are left alone, except that an allow
for a desired host overrides a deny rule on that host (the sidecar's merge).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from mango.provider import NetworkMode, PermanentError, SandboxSpec
from mango_provider_opensandbox.execd import Egress

__all__ = ["create_policy", "policy_hash", "reconcile"]


def create_policy(spec: SandboxSpec) -> dict[str, Any] | None:
    """The ``networkPolicy`` a sandbox of ``spec`` is created with (``None``: omit it)."""
    if spec.network is NetworkMode.BRIDGE:
        return None
    hosts = spec.network_allowed_hosts if spec.network is NetworkMode.LIMITED else ()
    return {
        "defaultAction": "deny",
        "egress": [{"action": "allow", "target": host} for host in hosts],
    }


def policy_hash(allowed: Iterable[str]) -> str:
    """A hash of a deny-by-default policy with these allow targets (order and case ignored)."""
    text = "deny\n" + "\n".join(sorted({host.lower() for host in allowed}))
    return hashlib.sha256(text.encode()).hexdigest()


def _allow_targets(policy: dict[str, Any]) -> list[str]:
    rules = policy.get("egress") or []
    if not isinstance(rules, list):
        raise PermanentError("the sandbox's egress policy has a malformed rule list")
    return [
        str(rule.get("target", "")).lower()
        for rule in rules
        if isinstance(rule, dict) and str(rule.get("action", "")).lower() == "allow"
    ]


async def reconcile(egress: Egress, desired: Sequence[str]) -> bool:
    """Make the sandbox's allow rules exactly ``desired``; True if anything had to change.

    Raises :class:`PermanentError` if the sandbox has no policy or one that
    allows by default (it was not created for limited networking): an
    allowlist never widens such a sandbox.
    """
    policy = await egress.policy()
    if policy is None:
        raise PermanentError(
            "the sandbox has no egress policy: it was created without limited networking"
        )
    if str(policy.get("defaultAction", "deny")).lower() != "deny":
        raise PermanentError(
            "the sandbox's egress policy allows by default; an allowlist would not restrict it"
        )
    current = _allow_targets(policy)
    wanted = [host.lower() for host in desired]
    if policy_hash(current) == policy_hash(wanted):
        return False
    remove = sorted(set(current) - set(wanted))
    if remove:
        await egress.remove(remove)
    present = set(current)
    add = [host for host in dict.fromkeys(wanted) if host not in present]
    if add:
        await egress.add([{"action": "allow", "target": host} for host in add])
    return True
