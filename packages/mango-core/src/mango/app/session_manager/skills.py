"""Skill effects: materialize a Session's pinned skills, and remove its pins on deletion.

* ``materialize-skills`` (a bound Session, before a tool step, ahead of
  ``materialize-resources``): every pinned skill present and intact in the
  bound sandbox (:func:`mango.app.skills.materialize_skills`). It reports no
  signal: only the last effect of a transition may, so a sandbox that
  vanished (at attach, or under an import) is left to the File Resource
  step after it, which attaches again and reports the loss;
* ``remove-session-skills`` (a finished deletion): the Session's pins go
  before its row.

A manager built without :class:`~mango.app.skills.SessionSkills` has no
pins: both do nothing.
"""

from __future__ import annotations

import attrs

from mango.app.session_manager.context import Done, EffectHandler, Lost, Outcome, Ports
from mango.app.session_manager.provisioning import ATTACH_RESOURCE, AttachInput
from mango.app.session_manager.resources import SessionOnly, session_only
from mango.app.skills import SkillReport, materialize_skills
from mango.domain.errors import SandboxNotFound

__all__ = ["MATERIALIZE_SKILLS", "REMOVE_SESSION_SKILLS", "SkillsMaterialized"]


@attrs.frozen
class SkillsMaterialized(Outcome):
    """The bound sandbox holds the Session's pinned skills (or it vanished: see the module)."""

    report: SkillReport


async def _materialize(ports: Ports, given: AttachInput) -> SkillsMaterialized:
    if ports.skills is None:
        return SkillsMaterialized(SkillReport())
    pinned = await ports.skills.catalog.session_skills(given.session_id)
    if not pinned:
        return SkillsMaterialized(SkillReport())
    attached = await ATTACH_RESOURCE.perform(ports, given)
    cached = ports.clients.get(given.session_id)
    if isinstance(attached, Lost) or cached is None:
        return SkillsMaterialized(SkillReport())  # the next step reports the loss
    try:
        report = await materialize_skills(
            ports.skills, given.session_id, cached.raw, ports.provider.name, pinned
        )
    except SandboxNotFound:
        ports.clients.forget(given.session_id, cached.raw.ref)
        return SkillsMaterialized(SkillReport())
    return SkillsMaterialized(report)


async def _remove(ports: Ports, given: SessionOnly) -> Done:
    if ports.skills is not None:
        await ports.skills.catalog.drop_session_skills(given.session_id)
    return Done()


MATERIALIZE_SKILLS = EffectHandler(
    gather=ATTACH_RESOURCE.gather, perform=_materialize, outcomes=(SkillsMaterialized,)
)
REMOVE_SESSION_SKILLS = EffectHandler(gather=session_only, perform=_remove)
