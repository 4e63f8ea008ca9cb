"""The lifecycle table's guards, and the ownership and proof checks effects share.

A guard reads the operation's :class:`~mango.app.session_manager.context.Facts`
and raises its typed error or returns; it performs no I/O. The interpreter
checks a transition's guards in order before its first effect.
"""

from __future__ import annotations

import shlex

from mango.app.session_manager.context import Facts, Ports
from mango.domain.errors import (
    OwnershipError,
    PermanentError,
    PreconditionFailed,
    SessionDeleting,
)
from mango.domain.hashing import binding_proves_package_setup, spec_hash_matches
from mango.domain.lifecycle import LifecycleCommand
from mango.domain.ports import Provider, Sandbox
from mango.domain.values import SandboxSpec

__all__ = [
    "check_sandbox",
    "intent_owned_here",
    "intent_spec_matches",
    "not_deleting",
    "owned_here",
    "packages_proven",
    "reports_bound_ref",
    "require_own",
    "require_package_proof",
]


def require_own(provider: Provider, session_id: str, owner: str, action: str) -> None:
    """Raise :class:`OwnershipError` unless ``owner`` is the provider selected here."""
    if owner != provider.name:
        raise OwnershipError(
            f"session {session_id!r} belongs to provider {owner!r}, "
            f"not to {provider.name!r} (the provider selected here)",
            hint=f"{action} it with MANGO_SANDBOX={owner} "
            "(on the durable path: in a worker of that provider)",
        )


def require_package_proof(session_id: str, binding_hash: str, spec: SandboxSpec) -> None:
    """Raise :class:`PermanentError` unless the binding proves ``spec``'s package plan."""
    if not binding_proves_package_setup(binding_hash, spec):
        raise PermanentError(
            f"session {session_id!r} is bound to a sandbox set up with another package plan; "
            "packages are never re-installed on a live sandbox",
            hint="delete the session to start over with the new package plan",
        )


def check_sandbox(provider: Provider, sandbox: Sandbox) -> None:
    """Raise :class:`OwnershipError` if ``provider`` handed back another provider's sandbox."""
    if sandbox.ref.provider != provider.name:
        raise OwnershipError(
            f"provider {provider.name!r} returned a sandbox of {sandbox.ref.provider!r}"
        )


def owned_here(ports: Ports, facts: Facts, command: str) -> None:
    """``owned-here``: the binding (else the intent) is this provider's.

    On deletion it runs before the fence: a command run with the wrong
    provider selected must leave the Session as it found it, not fenced and
    stuck until the right provider's worker comes along. A cached client is
    always this provider's.
    """
    action = "delete" if command == LifecycleCommand.DELETE else "use"
    binding, intent = facts.binding, facts.intent
    if binding is not None:
        require_own(ports.provider, facts.session_id, binding.ref.provider, action)
    elif intent is not None:
        require_own(ports.provider, facts.session_id, intent.provider, action)


def intent_owned_here(ports: Ports, facts: Facts, _command: str) -> None:
    """``intent-owned-here``: only the intent's provider may resume it."""
    intent = facts.intent
    if intent is not None and intent.provider != ports.provider.name:
        # Most often a first use that failed there (an unreachable provider, a
        # missing image) left the intent: say how to finish it or let the id go.
        owner, sid = intent.provider, facts.session_id
        raise OwnershipError(
            f"session {sid!r} is being provisioned by provider {owner!r} (its first use "
            f"there has not finished: it failed or is still running), not by "
            f"{ports.provider.name!r} (the provider selected here)",
            hint=f"finish it by retrying with MANGO_SANDBOX={owner}, or free the id with "
            f"'MANGO_SANDBOX={owner} mango sessions delete {shlex.quote(sid)}' "
            "(on the durable path: in a worker of that provider)",
        )


def intent_spec_matches(_ports: Ports, facts: Facts, _command: str) -> None:
    """``intent-spec-matches``: the intent was written for the requested spec."""
    intent = facts.intent
    if intent is not None and not spec_hash_matches(intent.spec_hash, facts.operation.spec):
        raise PermanentError(
            f"session {facts.session_id!r} is already being provisioned with another spec",
            hint="run 'mango reconcile' to finish it with the spec it started with",
        )


def packages_proven(_ports: Ports, facts: Facts, _command: str) -> None:
    """``packages-proven``: the binding (or the cached client's) proves the package plan."""
    cached, binding = facts.observed.cached, facts.binding
    binding_hash = binding.spec_hash if binding is not None else None
    if binding_hash is None and cached is not None:
        binding_hash = cached.spec_hash
    if binding_hash is not None:
        require_package_proof(facts.session_id, binding_hash, facts.spec)


def reports_bound_ref(_ports: Ports, facts: Facts, _command: str) -> None:
    """``reports-bound-ref``: a reported loss is of the resource bound now.

    A client handed out before the Session was deleted and re-created (or
    before another binding won) must not mark the newer binding lost.
    """
    lost = facts.lost
    if lost is not None and lost.ref != facts.bound_ref:
        raise PreconditionFailed(
            f"session {facts.session_id!r} is no longer bound to {lost.ref}; "
            "its loss is not the Session's"
        )


def not_deleting(_ports: Ports, facts: Facts, _command: str) -> None:
    """``not-deleting``: a fenced Session admits no new work, even on a live sandbox."""
    if facts.observed.record is not None and facts.observed.record.deleting:
        raise SessionDeleting(
            f"session {facts.session_id!r} is being deleted; it admits no new work"
        )
