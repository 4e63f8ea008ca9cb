"""An in-memory :class:`~mango.domain.skills.SkillCatalog` for unit tests and plugin authors.

The PostgreSQL catalog's semantics within one process, on an
:class:`~mango.app.memory_store.InMemoryBindingStore`'s Sessions. Not durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import attrs

from mango.app.memory_store import InMemoryBindingStore
from mango.domain.errors import InvalidInput, SessionDeleting
from mango.domain.skills import NewSkillVersion, SkillVersion, new_skill_id

__all__ = ["InMemorySkillCatalog"]


@attrs.define
class InMemorySkillCatalog:
    """Skill rows in dictionaries; Sessions in ``store``."""

    store: InMemoryBindingStore
    skills: dict[str, str] = attrs.field(factory=dict)
    """Skill name -> skill id."""
    versions: dict[str, list[SkillVersion]] = attrs.field(factory=dict)
    """Skill name -> its versions, oldest first."""
    pins: dict[str, tuple[SkillVersion, ...]] = attrs.field(factory=dict)
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, alias="_lock")

    async def add_version(self, new: NewSkillVersion) -> SkillVersion:
        """The next version of ``new.name``, or the latest if it has these bytes."""
        async with self._lock:
            skill_id = self.skills.setdefault(new.name, new_skill_id())
            versions = self.versions.setdefault(new.name, [])
            if versions and versions[-1].sha256 == new.sha256:
                return versions[-1]
            version = SkillVersion(
                skill_id,
                new.name,
                len(versions) + 1,
                new.description,
                new.blob_key,
                new.size,
                new.sha256,
                new.expanded_size,
                new.file_count,
                self.store.clock.now(),
            )
            versions.append(version)
            return version

    async def list_versions(self) -> Sequence[SkillVersion]:
        """Every version, by name then version."""
        return [v for name in sorted(self.versions) for v in self.versions[name]]

    async def get_version(self, name: str, version: int) -> SkillVersion | None:
        """One version, or None."""
        versions = self.versions.get(name, [])
        return versions[version - 1] if 1 <= version <= len(versions) else None

    async def create_session(
        self, session_id: str, versions: Sequence[SkillVersion]
    ) -> tuple[bool, tuple[SkillVersion, ...]]:
        """Create the Session with its pins (see the port)."""
        async with self._lock:
            existing = await self.store.get_session(session_id)
            record = await self.store.ensure_session(session_id)
            if record.deleting:
                raise SessionDeleting(f"session {session_id!r} is being deleted")
            wanted = tuple(versions)
            if existing is not None:
                pinned = self.pins.get(session_id, ())
                if [v.identity for v in pinned] != [v.identity for v in wanted]:
                    raise InvalidInput(
                        f"session {session_id!r} exists already: a Session's skills are "
                        "pinned when it is created"
                    )
                return False, pinned
            if wanted:
                self.pins[session_id] = wanted
            return True, wanted

    async def session_skills(self, session_id: str) -> tuple[SkillVersion, ...]:
        """The Session's pins, in order."""
        return self.pins.get(session_id, ())

    async def drop_session_skills(self, session_id: str) -> int:
        """Remove the Session's pins."""
        return len(self.pins.pop(session_id, ()))
