"""The fake's egress sidecar: the policy API with the sidecar's merge and removal rules."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from mango.fakes import FakeSandbox
from mango_provider_opensandbox.layout import EGRESS_AUTH_HEADER

__all__ = ["EgressRoutes", "rules_of"]


class EgressRoutes:
    """The sidecar's ``/policy`` routes; mixed into the fake server."""

    async def _egress(  # noqa: PLR0911 - one answer per error the sidecar gives
        self, request: web.Request, record: FakeSandbox, tail: str
    ) -> web.Response:
        if tail != "policy":
            return web.Response(status=404, text="not found")
        policy = record.extra.get("policy")
        if not isinstance(policy, dict):
            return web.Response(status=502, text="no egress sidecar (created without a policy)")
        if request.headers.get(EGRESS_AUTH_HEADER) != record.extra["egress_token"]:
            return web.Response(status=401, text="unauthorized")
        if request.method == "GET":
            return _status(policy, show=True)
        change = {"PATCH": _patched, "DELETE": _removed}.get(request.method)
        if change is None:
            return web.Response(status=405, text="method not allowed")
        raw = (await request.text()).strip()
        try:
            items = json.loads(raw) if raw else None
        except ValueError as exc:
            return web.Response(status=400, text=f"invalid body: {exc}")
        if not isinstance(items, list) or not items:
            return web.Response(status=400, text="invalid body: expected a non-empty array")
        egress = change(policy["egress"], items)
        if egress is None:
            return web.Response(status=400, text=f"invalid {request.method} body")
        policy["egress"] = egress
        return _status(policy, show=False)


def _status(policy: dict[str, Any], *, show: bool) -> web.Response:
    body: dict[str, Any] = {
        "status": "ok",
        "mode": "enforcing" if policy["egress"] else f"{policy['defaultAction']}_all",
        "enforcementMode": "dns",
    }
    if show:
        body["policy"] = policy
    return web.json_response(body)


def _patched(base: list[dict[str, str]], items: list[Any]) -> list[dict[str, str]] | None:
    """The sidecar's merge: incoming rules first, then the old ones; first rule per target wins."""
    rules = rules_of(items)
    if rules is None:
        return None
    merged: list[dict[str, str]] = []
    seen: set[str] = set()
    for rule in [*rules, *base]:
        key = rule["target"].lower()
        if key not in seen:
            seen.add(key)
            merged.append(rule)
    return merged


def _removed(base: list[dict[str, str]], items: list[Any]) -> list[dict[str, str]] | None:
    """Rules whose target is listed go (case-insensitive); unknown targets are ignored."""
    if not all(isinstance(item, str) for item in items):
        return None
    gone = {item.strip().lower() for item in items}
    return [rule for rule in base if rule["target"].lower() not in gone]


def rules_of(items: list[Any]) -> list[dict[str, str]] | None:
    """Validated ``{"action", "target"}`` rules (action defaults to deny), or None if malformed."""
    rules: list[dict[str, str]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        action = str(item.get("action") or "deny").strip().lower()
        target = str(item.get("target") or "").strip()
        if action not in ("allow", "deny") or not target:
            return None
        rules.append({"action": action, "target": target})
    return rules
