"""Custom Skills in the pure core: names, versions, pins, the mount a provider sees.

A **skill** is a directory with a ``SKILL.md`` at its top (its frontmatter
``name:`` names it), uploaded as a zip or a directory and kept as an
immutable **version** (``1``, ``2``, ...): one canonical zip archive in the
Files store (rules: :mod:`mango.domain.skill_archives`), its size, SHA-256,
expanded size and file count in the row. A Session **pins** versions when it
is created; before every tool step the materializer makes each pinned
version appear, complete and read-only, at ``/workspace/skills/<name>/``.

Names are unique per scope (one deployment's database): uploading another
tree under a name adds its next version; uploading the same bytes as the
latest version again returns that version. A Session pins at most one
version of a name, and the expanded sizes of its pins add up to at most
:data:`MAX_SESSION_SKILL_BYTES`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Protocol

import attrs

from mango.domain.errors import InvalidInput
from mango.domain.files import validate_sha256
from mango.domain.resources import validate_identity

__all__ = [
    "MAX_SESSION_SKILLS",
    "MAX_SESSION_SKILL_BYTES",
    "MAX_SKILL_ARCHIVE_BYTES",
    "MAX_SKILL_EXPANDED_BYTES",
    "MAX_SKILL_FILES",
    "SKILLS_ROOT",
    "SKILL_ID_PREFIX",
    "NewSkillVersion",
    "SkillCatalog",
    "SkillMount",
    "SkillRef",
    "SkillVersion",
    "check_session_skills",
    "new_skill_id",
    "parse_skill_ref",
    "skill_blob_key",
    "skill_mount",
    "validate_skill_id",
    "validate_skill_name",
]

SKILLS_ROOT = "/workspace/skills"
"""Where a Session's pinned skills appear in its sandbox (read-only, provider-owned)."""
MAX_SKILL_FILES = 1000
"""Files one skill may hold (its archive holds files only, no directory entries)."""
MAX_SKILL_ARCHIVE_BYTES = 30_000_000
"""A skill's archive is smaller than this."""
MAX_SKILL_EXPANDED_BYTES = 30_000_000
"""A skill's files add up to fewer bytes than this."""
MAX_SESSION_SKILL_BYTES = 500 * 1024 * 1024
"""The expanded skills of one Session add up to at most this (500 MiB)."""
MAX_SESSION_SKILLS = 64
"""Skills one Session may pin."""
SKILL_ID_PREFIX = "skill-"

_NAME = re.compile(r"[a-z0-9-]{1,64}\Z")
_SKILL_ID = re.compile(r"skill-[0-9a-f]{32}\Z")
_REF = re.compile(r"(?P<name>[^@]+)@(?P<version>[1-9][0-9]{0,8})\Z")


def new_skill_id() -> str:
    """A fresh skill id: ``skill-`` and 32 random hex digits."""
    return SKILL_ID_PREFIX + secrets.token_hex(16)


def validate_skill_id(value: object) -> str:
    """Return ``value`` if it is a skill id (``skill-`` and 32 lowercase hex)."""
    if not isinstance(value, str) or not _SKILL_ID.match(value):
        raise InvalidInput(f"{value!r} is not a skill id (skill- and 32 lowercase hex digits)")
    return value


def validate_skill_name(value: object) -> str:
    """Return ``value`` if it is a skill name: 1 to 64 of ``a-z``, ``0-9`` and ``-``."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidInput(
            f"skill name {value!r} must be 1 to 64 characters of a-z, 0-9 and '-'",
            hint="it comes from the 'name:' line of SKILL.md's frontmatter",
        )
    return value


@attrs.frozen
class SkillRef:
    """``NAME@VERSION``: one version of a skill, as a user names it."""

    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


def parse_skill_ref(text: object) -> SkillRef:
    """``"NAME@VERSION"`` as a :class:`SkillRef`; :class:`InvalidInput` if it is not one."""
    found = _REF.match(text) if isinstance(text, str) else None
    if found is None:
        raise InvalidInput(
            f"{text!r} is not NAME@VERSION (a skill name and a version number)",
            hint="list the skills and their versions with 'mango skills ls'",
        )
    return SkillRef(validate_skill_name(found["name"]), int(found["version"]))


def skill_blob_key(namespace: str, sha256: str) -> str:
    """The Files store key of a skill archive: content-addressed, ``<namespace>/skills/<sha>``.

    Archives are immutable, so two versions with the same bytes share one blob.
    """
    return f"{namespace}/skills/{validate_sha256(sha256)}.zip"


@attrs.frozen
class NewSkillVersion:
    """What a new version's row records; its archive is in the Files store already."""

    name: str = attrs.field(validator=lambda _i, _a, v: validate_skill_name(v))
    description: str
    blob_key: str
    size: int
    sha256: str = attrs.field(validator=lambda _i, _a, v: validate_sha256(v))
    expanded_size: int
    file_count: int


@attrs.frozen
class SkillVersion:
    """One immutable version of a skill: its canonical archive and what it expands to."""

    skill_id: str
    name: str
    version: int
    description: str
    blob_key: str
    size: int
    """Bytes of the canonical zip archive."""
    sha256: str
    """SHA-256 of the archive."""
    expanded_size: int
    """Bytes of its files once extracted."""
    file_count: int
    created_at: datetime

    @property
    def ref(self) -> SkillRef:
        """``NAME@VERSION``."""
        return SkillRef(self.name, self.version)

    @property
    def identity(self) -> str:
        """What the provider's marker records: ``<skill id>@<version>``."""
        return f"{self.skill_id}@{self.version}"


def _size(limit: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
            raise InvalidInput(f"skill {attribute.name} must be in [0, {limit}), got {value!r}")

    return check


def _runtime_path(instance: SkillMount, _attribute: object, value: str) -> None:
    if value != f"{SKILLS_ROOT}/{instance.name}":
        raise InvalidInput(f"skill runtime path {value!r} must be {SKILLS_ROOT}/{instance.name}")


@attrs.frozen
class SkillMount:
    """A pinned skill as a provider sees it: identity, place, and what the archive must be.

    ``runtime_path`` is ``/workspace/skills/<name>``; the archive's entries
    all lie below ``<name>/`` (its root, stripped when extracted).
    """

    identity: str = attrs.field(validator=lambda _i, _a, v: validate_identity(v))
    name: str = attrs.field(validator=lambda _i, _a, v: validate_skill_name(v))
    runtime_path: str = attrs.field(validator=_runtime_path)
    size: int = attrs.field(validator=_size(MAX_SKILL_ARCHIVE_BYTES))
    expanded_size: int = attrs.field(validator=_size(MAX_SKILL_EXPANDED_BYTES))
    sha256: str = attrs.field(validator=lambda _i, _a, v: validate_sha256(v))

    @property
    def archive_root(self) -> str:
        """The archive's top directory: the skill's name."""
        return self.name

    def marker(self) -> bytes:
        """The provider's marker body: every field, one per line."""
        fields = (
            self.identity,
            self.name,
            self.runtime_path,
            self.archive_root,
            self.size,
            self.expanded_size,
            self.sha256,
        )
        return "".join(f"{field}\n" for field in fields).encode()


def skill_mount(version: SkillVersion) -> SkillMount:
    """The mount of a pinned version: at ``/workspace/skills/<name>``."""
    return SkillMount(
        identity=version.identity,
        name=version.name,
        runtime_path=f"{SKILLS_ROOT}/{version.name}",
        size=version.size,
        expanded_size=version.expanded_size,
        sha256=version.sha256,
    )


def check_session_skills(versions: Iterable[SkillVersion]) -> tuple[SkillVersion, ...]:
    """``versions`` if one Session may pin them all, else :class:`InvalidInput` (every reason).

    One version per name (they would share ``/workspace/skills/<name>``), at
    most :data:`MAX_SESSION_SKILLS`, and at most :data:`MAX_SESSION_SKILL_BYTES`
    expanded in all.
    """
    chosen = tuple(versions)
    reasons: list[str] = []
    seen: dict[str, SkillVersion] = {}
    for version in chosen:
        if version.name in seen:
            reasons.append(
                f"{seen[version.name].ref} and {version.ref} would both be "
                f"{SKILLS_ROOT}/{version.name}"
            )
        seen[version.name] = version
    if len(chosen) > MAX_SESSION_SKILLS:
        reasons.append(f"{len(chosen)} skills, at most {MAX_SESSION_SKILLS}")
    total = sum(version.expanded_size for version in chosen)
    if total > MAX_SESSION_SKILL_BYTES:
        reasons.append(
            f"{total} bytes of expanded skills, at most {MAX_SESSION_SKILL_BYTES} (500 MiB)"
        )
    if reasons:
        raise InvalidInput("a Session cannot pin these skills: " + "; ".join(reasons))
    return chosen


class SkillCatalog(Protocol):
    """The rows of skills, their versions and the Sessions' pins (PostgreSQL in production).

    Connection failures raise :class:`~mango.domain.errors.ProviderUnavailable` (retry).
    """

    async def add_version(self, new: NewSkillVersion) -> SkillVersion:
        """Record a new version of skill ``new.name`` (the skill too, on its first upload).

        Its archive is in the Files store already. If the latest version has
        the same SHA-256 it is returned instead (an upload repeated is one
        version). Two uploads racing for one name get consecutive versions.
        """
        ...

    async def list_versions(self) -> Sequence[SkillVersion]:
        """Every version of every skill, by name, then version."""
        ...

    async def get_version(self, name: str, version: int) -> SkillVersion | None:
        """One version, or None."""
        ...

    async def create_session(
        self, session_id: str, versions: Sequence[SkillVersion]
    ) -> tuple[bool, tuple[SkillVersion, ...]]:
        """Create the Session with its pins, in one step; ``(created, pins)``.

        An existing Session with exactly these pins is success
        (``created=False``): a retry. An existing Session with other pins
        raises :class:`InvalidInput` (pins are fixed when it is created), a
        fenced one :class:`~mango.domain.errors.SessionDeleting`.
        """
        ...

    async def session_skills(self, session_id: str) -> tuple[SkillVersion, ...]:
        """The Session's pinned versions, in the order they were pinned."""
        ...

    async def drop_session_skills(self, session_id: str) -> int:
        """Remove a (fenced) Session's pins; how many went. Idempotent."""
        ...
