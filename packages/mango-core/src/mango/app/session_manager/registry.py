"""The registry of effect handlers and guard checks, checked against a lifecycle table.

The interpreter performs a table's effects and guards only through a
:class:`Handlers` registry, and a SessionManager checks the two fit when it
is built (:meth:`Handlers.check`). A new step (materialize resources before a
tool step, the memory wave, publish outputs before idle, the final memory
write-back on delete) is a row of a table and a handler here: the
interpreter does not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from mango.app.session_manager import (
    fleet,
    guards,
    pause,
    provisioning,
    resources,
    skills,
    teardown,
)
from mango.app.session_manager.context import EffectHandler, GuardCheck
from mango.domain.errors import LifecycleTableError
from mango.domain.lifecycle import LifecycleEffect, LifecycleGuard, LifecycleTable

__all__ = ["Handlers", "default_handlers"]

_E = LifecycleEffect
_G = LifecycleGuard


def _effects(value: Mapping[str, EffectHandler[Any]]) -> Mapping[str, EffectHandler[Any]]:
    return MappingProxyType(dict(value))


def _guards(value: Mapping[str, GuardCheck]) -> Mapping[str, GuardCheck]:
    return MappingProxyType(dict(value))


@attrs.frozen
class Handlers:
    """Effect name -> its handler; guard name -> its check."""

    effects: Mapping[str, EffectHandler[Any]] = attrs.field(converter=_effects)
    guards: Mapping[str, GuardCheck] = attrs.field(converter=_guards)

    def with_effect(self, name: str, handler: EffectHandler[Any]) -> Handlers:
        """A copy that performs effect ``name`` with ``handler``."""
        return Handlers({**self.effects, name: handler}, self.guards)

    def with_guard(self, name: str, check: GuardCheck) -> Handlers:
        """A copy that checks guard ``name`` with ``check``."""
        return Handlers(self.effects, {**self.guards, name: check})

    def check(self, table: LifecycleTable) -> None:
        """Raise :class:`LifecycleTableError` unless every effect and guard of ``table`` is here.

        Each handler's outcomes must carry exactly the signals the table
        declares for its effect, so every signal it reports has a follow-up.
        """
        problems = [f"no handler for effect {n}" for n in _missing(table.effects, self.effects)]
        problems += [f"no check for guard {n}" for n in _missing(table.guards, self.guards)]
        for name in sorted(table.effects & set(self.effects)):
            reported, declared = self.effects[name].signals, table.emits(name)
            if reported != declared:
                problems.append(
                    f"the handler of {name} reports {sorted(reported) or 'no signal'}, "
                    f"the table declares {sorted(declared) or 'none'}"
                )
        if problems:
            raise LifecycleTableError(problems)


def _missing(names: frozenset[str], registered: Mapping[str, object]) -> list[str]:
    return sorted(name for name in names if name not in registered)


def default_handlers() -> Handlers:
    """The handlers of the default table (:data:`~mango.domain.lifecycle.LIFECYCLE`)."""
    return Handlers(
        {
            _E.PERSIST_INTENT: provisioning.PERSIST_INTENT,
            _E.RESERVE_SLOT: fleet.RESERVE_SLOT,
            _E.CREATE_RESOURCE: provisioning.CREATE_RESOURCE,
            _E.SETUP_RESOURCE: provisioning.SETUP_RESOURCE,
            _E.PUBLISH_BINDING: provisioning.PUBLISH_BINDING,
            _E.RECORD_USE: fleet.RECORD_USE,
            _E.ATTACH_RESOURCE: provisioning.ATTACH_RESOURCE,
            _E.RECORD_LOST: provisioning.RECORD_LOST,
            _E.FAIL_LOST: provisioning.FAIL_LOST,
            _E.MARK_EVICTED: fleet.MARK_EVICTED,
            _E.DESTROY_EVICTED: fleet.DESTROY_EVICTED,
            _E.FAIL_EVICTED: fleet.FAIL_EVICTED,
            _E.FENCE_SESSION: teardown.FENCE_SESSION,
            _E.DESTROY_RESOURCE: teardown.DESTROY_RESOURCE,
            _E.REMOVE_BINDING: teardown.REMOVE_BINDING,
            _E.REMOVE_INTENT: teardown.REMOVE_INTENT,
            _E.DELETE_SESSION: teardown.DELETE_SESSION,
            _E.MATERIALIZE_SKILLS: skills.MATERIALIZE_SKILLS,
            _E.MATERIALIZE_RESOURCES: resources.MATERIALIZE_RESOURCES,
            _E.FINISH_REMOVALS: resources.FINISH_REMOVALS,
            _E.PUBLISH_OUTPUTS: resources.PUBLISH_OUTPUTS,
            _E.REMOVE_SESSION_FILES: resources.REMOVE_SESSION_FILES,
            _E.MARK_PAUSED: pause.MARK_PAUSED,
            _E.MARK_PAUSED_IDLE: pause.MARK_PAUSED_IDLE,
            _E.PAUSE_RESOURCE: pause.PAUSE_RESOURCE,
            _E.RESUME_RESOURCE: pause.RESUME_RESOURCE,
            _E.CLEAR_PAUSED: pause.CLEAR_PAUSED,
            _E.REMOVE_SESSION_SKILLS: skills.REMOVE_SESSION_SKILLS,
        },
        {
            _G.OWNED_HERE: guards.owned_here,
            _G.INTENT_OWNED_HERE: guards.intent_owned_here,
            _G.INTENT_SPEC_MATCHES: guards.intent_spec_matches,
            _G.PACKAGES_PROVEN: guards.packages_proven,
            _G.REPORTS_BOUND_REF: guards.reports_bound_ref,
            _G.NOT_DELETING: guards.not_deleting,
        },
    )
