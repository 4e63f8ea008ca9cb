"""Custom Skills: uploaded as canonical archives, pinned by a Session, materialized before a step.

:class:`SessionSkills` works through a :class:`~mango.domain.skills.SkillCatalog`
(the rows) and the Files store's blobs:

* :meth:`~SessionSkills.add` turns a directory or zip into its canonical
  archive (:mod:`mango.app.skill_upload`; every rule checked there), writes
  the archive to the Files store (content-addressed, verified as it is
  written) and only then records the version, so a row always names a
  complete archive; the same bytes as the latest version are that version;
* :meth:`~SessionSkills.create_session` resolves ``NAME@VERSION`` pins,
  checks them together (one version per name, the 500 MiB budget) and
  writes the Session with its pins in one step;
* :func:`materialize_skills` runs before every tool step (the lifecycle
  table's ``materialize-skills``): each pinned version present and intact
  in the sandbox is skipped, anything else (never imported, damaged on the
  host) is imported from its archive, which the provider verifies as it
  streams. A sandbox that cannot hold skills while the Session pins some is
  :class:`~mango.domain.errors.CapabilityNotSupported` (permanent).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

import attrs

from mango.app.skill_upload import CanonicalSkill, canonical_skill
from mango.domain.errors import CapabilityNotSupported, InvalidInput, PermanentError
from mango.domain.files import FileStore
from mango.domain.ports import Sandbox, SkillBundleSandbox
from mango.domain.skills import (
    NewSkillVersion,
    SkillCatalog,
    SkillMount,
    SkillRef,
    SkillVersion,
    check_session_skills,
    parse_skill_ref,
    skill_blob_key,
    skill_mount,
)
from mango.domain.values import validate_session_id

__all__ = ["CreatedSession", "SessionSkills", "SkillReport", "materialize_skills"]

_CHUNK = 1024 * 1024


@attrs.frozen
class CreatedSession:
    """A Session as :meth:`SessionManager.create_session` left it."""

    session_id: str
    created: bool
    """False if it existed already (with the same pins)."""
    skills: tuple[SkillVersion, ...] = ()
    """Its pinned skill versions, in order."""


@attrs.frozen
class SkillReport:
    """What one skill materialization did."""

    imported: int = 0
    present: int = 0
    """Pinned skills whose tree was already there and intact (skipped)."""


async def _chunks(skill: CanonicalSkill) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(skill.archive.read, _CHUNK):
        yield chunk


@attrs.define
class SessionSkills:
    """Skills, their versions and the Sessions' pins, on a catalog and the Files store."""

    catalog: SkillCatalog
    blobs: FileStore
    namespace: str

    async def add(self, path: str | os.PathLike[str]) -> SkillVersion:
        """Upload the skill directory or zip at ``path``; its version (``NAME@VERSION``).

        :class:`~mango.domain.errors.UnsafeArchiveError` or :class:`InvalidInput`
        name what breaks a rule; nothing is recorded then.
        """
        skill = await asyncio.to_thread(canonical_skill, Path(path))
        try:
            key = skill_blob_key(self.namespace, skill.sha256)
            await self.blobs.put(key, _chunks(skill), size=skill.size, sha256=skill.sha256)
        finally:
            skill.archive.close()
        new = NewSkillVersion(
            skill.name,
            skill.description,
            key,
            skill.size,
            skill.sha256,
            skill.expanded_size,
            skill.file_count,
        )
        return await self.catalog.add_version(new)

    async def list_versions(self) -> Sequence[SkillVersion]:
        """Every version of every skill, by name then version."""
        return await self.catalog.list_versions()

    async def resolve(self, refs: Iterable[str | SkillRef]) -> tuple[SkillVersion, ...]:
        """The versions ``refs`` name (``"NAME@VERSION"``), checked together for one Session."""
        versions: list[SkillVersion] = []
        for ref in refs:
            parsed = ref if isinstance(ref, SkillRef) else parse_skill_ref(ref)
            found = await self.catalog.get_version(parsed.name, parsed.version)
            if found is None:
                raise InvalidInput(
                    f"there is no skill {parsed}",
                    hint="list the skills and their versions with 'mango skills ls'",
                )
            versions.append(found)
        return check_session_skills(versions)

    async def create_session(
        self, session_id: str, refs: Iterable[str | SkillRef] = ()
    ) -> tuple[bool, tuple[SkillVersion, ...]]:
        """Create the Session with the skills ``refs`` pin; ``(created, pins)`` (see the port)."""
        validate_session_id(session_id)
        versions = await self.resolve(refs)
        return await self.catalog.create_session(session_id, versions)

    async def session_skills(self, session_id: str) -> tuple[SkillVersion, ...]:
        """The Session's pinned versions."""
        return await self.catalog.session_skills(validate_session_id(session_id))


def _capable(sandbox: Sandbox, session_id: str, provider: str) -> SkillBundleSandbox:
    if not isinstance(sandbox, SkillBundleSandbox):
        raise CapabilityNotSupported(
            provider,
            [f"{provider} does not support skill bundle mounts, which session {session_id!r} pins"],
            hint="use a provider that declares skill-bundles (docker)",
        )
    return sandbox


async def materialize_skills(
    skills: SessionSkills,
    session_id: str,
    sandbox: Sandbox,
    provider: str,
    pinned: Sequence[SkillVersion] | None = None,
) -> SkillReport:
    """Make every pinned skill of the Session (``pinned``, else read) present and intact."""
    if pinned is None:
        pinned = await skills.catalog.session_skills(session_id)
    pinned = check_session_skills(pinned)
    if not pinned:
        return SkillReport()
    target = _capable(sandbox, session_id, provider)
    mounts = [skill_mount(version) for version in pinned]
    found = await target.has_skill_bundles(mounts)  # one call for all: it runs every step
    imported = 0
    for version, mount, present in zip(pinned, mounts, found, strict=True):
        if present:
            continue
        await _import(skills, target, version, mount)
        imported += 1
    return SkillReport(imported=imported, present=len(pinned) - imported)


async def _import(
    skills: SessionSkills, target: SkillBundleSandbox, version: SkillVersion, mount: SkillMount
) -> None:
    # The provider counts and hashes the archive as it arrives: hashed once.
    try:
        opened = skills.blobs.open(version.blob_key, size=version.size)
        async with opened as chunks:
            await target.import_skill_bundle(mount, chunks)
    except FileNotFoundError:
        # A version's archive is written before its row and never removed: a retry
        # cannot bring it back.
        raise PermanentError(
            f"the archive of skill {version.ref} is missing from the Files store "
            f"({skills.blobs.location}, key {version.blob_key})",
            hint="upload the skill again (the same tree restores the same archive)",
        ) from None
