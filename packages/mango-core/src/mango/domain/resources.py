"""Session resources in the pure core: File Resource mounts, their paths and their rows.

A **Session resource** attaches a stored file (:mod:`mango.domain.files`) to
a Session at a mount path below :data:`UPLOADS_ROOT`. Its row (a
:class:`SessionResource`, kept by a :class:`ResourceCatalog`) is ``active``
while the file should be in the sandbox and ``deleting`` once it was removed:
the materializer removes a deleting resource from the sandbox before it
removes the row, so a crash between the two is finished by the next pass.

The rules a new resource meets, each checked before anything changes
(:func:`resolve_mount_path`, :func:`overlapping_paths`):

* the mount path defaults to ``/mnt/session/uploads/<file id>``; a relative
  path, or an absolute one outside the uploads root, is re-rooted below it;
* no ``..`` component, no control character, valid UTF-8, at most 1024
  bytes (255 per component);
* no two active resources of a Session at overlapping paths (the same path,
  or one a parent directory of the other);
* at most :data:`MAX_SESSION_RESOURCES` active resources per Session.

A provider sees a resource as a :class:`FileResourceMount`: the resource id
as its identity (it tells successive resources at one path apart, and
survives restarts), the path, and the size and SHA-256 the copy must have.
"""

from __future__ import annotations

import enum
import posixpath
import re
import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

import attrs

from mango.domain.errors import InvalidInput, InvalidPathError, PathEscapeError
from mango.domain.files import validate_file_id, validate_sha256
from mango.domain.paths import MAX_PATH_BYTES, split_absolute_path
from mango.domain.values import validate_session_id

__all__ = [
    "MAX_SESSION_RESOURCES",
    "OUTPUTS_ROOT",
    "RESOURCE_ID_PREFIX",
    "UPLOADS_ROOT",
    "FileResourceMount",
    "NewResource",
    "ResourceCatalog",
    "ResourceKind",
    "ResourceState",
    "SessionResource",
    "check_mount_path",
    "default_mount_path",
    "new_resource_id",
    "overlapping_paths",
    "resolve_mount_path",
    "validate_identity",
    "validate_resource_id",
]

UPLOADS_ROOT = "/mnt/session/uploads"
"""Where File Resources appear in a sandbox: read-only, provider-owned."""
OUTPUTS_ROOT = "/mnt/session/outputs"
"""Where a sandbox's commands and tools leave what the Session publishes."""
MAX_SESSION_RESOURCES = 500
"""Active File Resources one Session may have."""
RESOURCE_ID_PREFIX = "res-"
MAX_IDENTITY_BYTES = 255

_RESOURCE_ID = re.compile(r"res-[0-9a-f]{32}\Z")


class ResourceKind(enum.Enum):
    """What a Session resource attaches (only stored files so far)."""

    FILE = "file"


class ResourceState(enum.Enum):
    """``active``: it belongs in the sandbox; ``deleting``: it is being removed from it."""

    ACTIVE = "active"
    DELETING = "deleting"


def new_resource_id() -> str:
    """A fresh Session resource id: ``res-`` and 32 random hex digits."""
    return RESOURCE_ID_PREFIX + secrets.token_hex(16)


def validate_resource_id(value: object) -> str:
    """Return ``value`` if it is a Session resource id (``res-`` and 32 lowercase hex)."""
    if not isinstance(value, str) or not _RESOURCE_ID.match(value):
        raise InvalidInput(
            f"{value!r} is not a Session resource id (res- and 32 lowercase hex digits)",
            hint="ids are printed by 'mango resources add' and listed by 'mango resources ls'",
        )
    return value


def _has_control(text: str) -> bool:
    return any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in text)


def validate_identity(value: object) -> str:
    """Return a mount identity: 1 to 255 bytes of UTF-8 with no control character."""
    if not isinstance(value, str) or not value:
        raise InvalidInput("a resource mount's identity must be a non-empty string")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"resource identity {value!r} is not valid UTF-8") from None
    if len(encoded) > MAX_IDENTITY_BYTES or _has_control(value):
        raise InvalidInput(
            f"resource identity {value!r} must be at most {MAX_IDENTITY_BYTES} bytes "
            "with no control characters"
        )
    return value


def default_mount_path(file_id: str) -> str:
    """Where a file is mounted when no path is given: ``/mnt/session/uploads/<file id>``."""
    return f"{UPLOADS_ROOT}/{validate_file_id(file_id)}"


def check_mount_path(path: object) -> str:
    """Return ``path`` if it is a normal absolute path strictly below :data:`UPLOADS_ROOT`.

    The providers' rule: no re-rooting, no ``..``, no ``.`` or repeated
    slash, no control character, at most 1024 bytes (255 per component).
    Raises :class:`InvalidPathError` (``..``: :class:`PathEscapeError`).
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"a mount path must be a string, got {type(path).__name__}")
    parts = split_absolute_path(path)
    normal = "/" + "/".join(parts)
    root = UPLOADS_ROOT.strip("/").split("/")
    if normal != path or len(parts) <= len(root) or list(parts[: len(root)]) != root:
        raise InvalidPathError(f"mount path {path!r} is not a normal path below {UPLOADS_ROOT}/")
    return path


def resolve_mount_path(file_id: str, path: str | None) -> str:
    """The mount path a new resource gets: ``path`` re-rooted below the uploads root.

    ``None`` (or an empty string) is :func:`default_mount_path`. A relative
    path goes below the uploads root; an absolute path inside it stays, one
    outside it is re-rooted (``/data/x.csv`` -> ``/mnt/session/uploads/data/x.csv``).
    A ``..`` component anywhere is refused, never folded away. Raises
    :class:`InvalidPathError` (a subclass of :class:`InvalidInput`) naming
    the rule.
    """
    if path is None or path == "":
        return default_mount_path(file_id)
    if not isinstance(path, str):
        raise InvalidPathError(f"a mount path must be a string, got {type(path).__name__}")
    if ".." in path.split("/"):
        raise PathEscapeError(
            f"mount path {path!r} has a '..' component; a mount path stays below {UPLOADS_ROOT}"
        )
    parts = split_absolute_path("/" + path.lstrip("/"))
    if not parts:
        raise InvalidPathError(f"mount path {path!r} names no file")
    root = tuple(UPLOADS_ROOT.strip("/").split("/"))
    if parts[: len(root)] == root:
        parts = parts[len(root) :]
        if not parts:
            raise InvalidPathError(
                f"mount path {path!r} is the uploads root itself; name a file below it"
            )
    resolved = posixpath.join(UPLOADS_ROOT, *parts)
    if len(resolved.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPathError(
            f"mount path {resolved!r} is longer than {MAX_PATH_BYTES} bytes below the uploads root"
        )
    return check_mount_path(resolved)


def _overlap(first: str, second: str) -> bool:
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")


def overlapping_paths(existing: Iterable[str], path: str) -> list[str]:
    """The paths of ``existing`` that ``path`` overlaps (equal, or one inside the other)."""
    return sorted(other for other in existing if _overlap(other, path))


def _validated(function: Any) -> Any:
    def check(_instance: object, _attribute: object, value: Any) -> None:
        function(value)

    return check


@attrs.frozen
class NewResource:
    """A File Resource to attach: its id, Session, file and (resolved) mount path."""

    resource_id: str = attrs.field(validator=_validated(validate_resource_id))
    session_id: str = attrs.field(validator=_validated(validate_session_id))
    file_id: str = attrs.field(validator=_validated(validate_file_id))
    mount_path: str = attrs.field(validator=_validated(check_mount_path))


@attrs.frozen
class SessionResource:
    """A Session resource's row."""

    resource_id: str
    session_id: str
    kind: ResourceKind
    file_id: str
    mount_path: str
    state: ResourceState
    created_at: datetime
    updated_at: datetime

    @property
    def active(self) -> bool:
        """Whether the resource belongs in the sandbox."""
        return self.state is ResourceState.ACTIVE


def _non_negative(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(
            f"a File Resource's size must be an integer of at least 0, got {value!r}"
        )


@attrs.frozen
class FileResourceMount:
    """What a provider is asked to put into (or find in) a sandbox.

    ``identity`` is the Session resource id; ``runtime_path`` a normal path
    strictly below :data:`UPLOADS_ROOT`; ``size`` and ``sha256`` what the
    copy must be (checked while it is written). Invalid values are
    :class:`InvalidInput` (permanent), before any provider call.
    """

    identity: str = attrs.field(validator=_validated(validate_identity))
    runtime_path: str = attrs.field(validator=_validated(check_mount_path))
    size: int = attrs.field(validator=_non_negative)
    sha256: str = attrs.field(validator=_validated(validate_sha256))

    @property
    def relative_path(self) -> str:
        """The path below the uploads root (``a/b.csv``)."""
        return self.runtime_path[len(UPLOADS_ROOT) + 1 :]


class ResourceCatalog(Protocol):
    """The rows of Session resources (PostgreSQL in production).

    Connection failures raise :class:`~mango.domain.errors.ProviderUnavailable` (retry).
    """

    async def add_resource(
        self, new: NewResource, *, limit: int = MAX_SESSION_RESOURCES
    ) -> SessionResource:
        """Insert an ``active`` resource, checked under the Session's row lock.

        The Session must exist (else :class:`InvalidInput`) and not be fenced
        (:class:`~mango.domain.errors.SessionDeleting`); the file must be
        ``ready`` (:class:`~mango.domain.errors.StoredFileNotFound`,
        :class:`~mango.domain.errors.StoredFileNotReady`); its path may not
        overlap an active resource's, and the Session may have at most
        ``limit`` active ones (:class:`InvalidInput` naming the rule).
        """
        ...

    async def get_resource(self, resource_id: str) -> SessionResource | None:
        """The row in any state, or None."""
        ...

    async def list_resources(self, session_id: str) -> Sequence[SessionResource]:
        """A Session's rows: ``deleting`` ones first, then by age (the materializer's order)."""
        ...

    async def begin_remove(self, session_id: str, resource_id: str) -> SessionResource | None:
        """Move the Session's resource to ``deleting`` and return it; None if it has no such one.

        A resource already ``deleting`` comes back unchanged (finish it).
        """
        ...

    async def finish_remove(self, resource_id: str) -> bool:
        """Delete a ``deleting`` row (the sandbox no longer holds it); True if it was there."""
        ...

    async def drop_session_resources(self, session_id: str) -> int:
        """Delete every resource row of a fenced Session (its sandbox is gone); how many."""
        ...
