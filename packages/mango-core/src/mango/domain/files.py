"""The Files store in the pure core: stored-file values, their rules, and two ports.

A stored file is two things that must agree:

* a **row** (:class:`StoredFile`, kept by a :class:`FileCatalog`): id,
  filename, MIME type, state, and, once ready, the size and SHA-256 the
  content must have;
* a **blob** (kept by a :class:`FileStore` under the row's ``blob_key``):
  the bytes, streamed in and out, never held whole in memory.

Uploads are two-phase: the row is written ``uploading`` first, the bytes are
streamed and verified, and only then does the row become ``ready``, so a
crash at any point leaves nothing a user can see half-written. Deletion is
the reverse: the row becomes ``deleting`` (invisible), the blob goes, then
the row. A reconciler pass finishes what a crash cut short; because a row is
always written before its blob and removed after it, a blob with no row is a
leftover too.

Blob keys carry the deployment namespace (``<namespace>/files/<file id>``),
so deployments sharing one bucket or directory never see, or reconcile away,
each other's blobs.

:class:`ContentCheck` is the one place that counts and hashes bytes as they
pass, for every store.

Over 400 lines on purpose: the values, their rules and the two ports are one
contract, which the stores (a directory, S3) and the PostgreSQL catalog
implement (``tests/files/test_file_store_contract.py`` holds every store to
it); a third of the length is the docstrings stating it, and a rule kept
apart from the port that relies on it would be read without it.
"""

from __future__ import annotations

import enum
import hashlib
import re
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from mango.domain.errors import ContentMismatch, InvalidInput
from mango.domain.values import validate_session_id

__all__ = [
    "DEFAULT_MIME_TYPE",
    "FILE_ID_PREFIX",
    "MAX_BLOB_KEY_LENGTH",
    "MAX_FILENAME_BYTES",
    "MAX_MIME_TYPE_LENGTH",
    "MAX_OUTPUT_PATH_BYTES",
    "BlobEntry",
    "BlobInfo",
    "ContentCheck",
    "FileCatalog",
    "FileState",
    "FileStore",
    "NewFile",
    "StoredFile",
    "file_blob_key",
    "file_blob_prefix",
    "new_file_id",
    "validate_blob_key",
    "validate_file_id",
    "validate_filename",
    "validate_mime_type",
    "validate_sha256",
]

FILE_ID_PREFIX = "file-"
MAX_FILENAME_BYTES = 255
MAX_OUTPUT_PATH_BYTES = 1024
MAX_BLOB_KEY_LENGTH = 1024
DEFAULT_MIME_TYPE = "application/octet-stream"

_FILE_ID = re.compile(r"file-[0-9a-f]{32}\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}\Z")
# type "/" subtype (RFC 6838 restricted names), then optional "; parameters" in printable ASCII.
_MIME = re.compile(
    r"[A-Za-z0-9][\w!#$&^.+-]{0,126}/[A-Za-z0-9][\w!#$&^.+-]{0,126}(;[ -~]*)?\Z", re.ASCII
)
MAX_MIME_TYPE_LENGTH = 255


class FileState(enum.Enum):
    """Where a stored file is in its life: only ``ready`` files are visible."""

    UPLOADING = "uploading"
    READY = "ready"
    DELETING = "deleting"


def new_file_id() -> str:
    """A fresh stored-file id: ``file-`` and 32 random hex digits (128 bits)."""
    return FILE_ID_PREFIX + secrets.token_hex(16)


def validate_file_id(value: object) -> str:
    """Return ``value`` if it is a stored-file id (``file-`` and 32 lowercase hex)."""
    if not isinstance(value, str) or not _FILE_ID.match(value):
        raise InvalidInput(
            f"{value!r} is not a stored-file id (file- and 32 lowercase hex digits)",
            hint="ids are printed by 'mango store put' and listed by 'mango store ls'",
        )
    return value


def _has_control(text: str) -> bool:
    return any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in text)


def validate_filename(value: object) -> str:
    """Return ``value`` if it is a usable filename, else raise :class:`InvalidInput`.

    1 to 255 bytes of UTF-8, no control characters, no ``/``, not ``.`` or
    ``..``: a name, never a path.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput("a stored file's name must be a non-empty string")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"file name {value!r} is not valid UTF-8") from None
    if len(encoded) > MAX_FILENAME_BYTES:
        raise InvalidInput(f"file name is longer than {MAX_FILENAME_BYTES} bytes of UTF-8")
    if "/" in value or value in {".", ".."}:
        raise InvalidInput(
            f"file name {value!r} must be a name, not a path", hint="pass --name NAME"
        )
    if _has_control(value):
        raise InvalidInput(f"file name {value!r} contains control characters")
    return value


def validate_mime_type(value: object) -> str:
    """Return ``value`` if it is a ``type/subtype`` MIME type (parameters allowed)."""
    if not isinstance(value, str) or len(value) > MAX_MIME_TYPE_LENGTH or not _MIME.match(value):
        raise InvalidInput(f"{value!r} is not a MIME type (type/subtype)")
    return value


def validate_sha256(value: object) -> str:
    """Return ``value`` if it is a lowercase hex SHA-256 digest (64 characters)."""
    if not isinstance(value, str) or not _SHA256.match(value):
        raise InvalidInput(f"{value!r} is not a lowercase hex SHA-256 digest")
    return value


def validate_blob_key(value: object) -> str:
    """Return ``value`` if it is a blob key, else raise :class:`InvalidInput`.

    ``/``-separated segments, each starting with a letter or digit and made
    of letters, digits, ``.``, ``_`` and ``-``; at most 1024 characters. No
    empty segment, no ``..``, no leading ``/``: a key maps to a path below a
    store's root on every store, and names nothing a store keeps for itself.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_BLOB_KEY_LENGTH:
        raise InvalidInput(f"blob key {value!r} must be 1 to {MAX_BLOB_KEY_LENGTH} characters")
    if not all(_KEY_SEGMENT.match(segment) for segment in value.split("/")):
        raise InvalidInput(
            f"blob key {value!r} must be '/'-separated segments of letters, digits, '.', '_' "
            "and '-', each starting with a letter or digit"
        )
    return value


def file_blob_prefix(namespace: str) -> str:
    """The key prefix of a deployment's stored-file blobs: ``<namespace>/files/``."""
    return f"{namespace}/files/"


def file_blob_key(namespace: str, file_id: str) -> str:
    """The blob key of a stored file: ``<namespace>/files/<file id>``."""
    return file_blob_prefix(namespace) + validate_file_id(file_id)


def _optional_session(_instance: object, _attribute: object, value: Any) -> None:
    if value is not None:
        validate_session_id(value)


def _output_path(instance: Any, _attribute: object, value: Any) -> None:
    if value is None:
        return
    if instance.session_id is None:
        raise InvalidInput("a Session output file needs its Session")
    if not isinstance(value, str) or not value or _has_control(value):
        raise InvalidInput(f"output path {value!r} must be non-empty, with no control characters")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_OUTPUT_PATH_BYTES:
        raise InvalidInput(f"output path is longer than {MAX_OUTPUT_PATH_BYTES} bytes")


def _validated(function: Any) -> Any:
    def check(_instance: object, _attribute: object, value: Any) -> None:
        function(value)

    return check


@attrs.frozen
class NewFile:
    """What a new stored file's row starts with (state ``uploading``, no size yet)."""

    file_id: str = attrs.field(validator=_validated(validate_file_id))
    filename: str = attrs.field(validator=_validated(validate_filename))
    mime_type: str = attrs.field(validator=_validated(validate_mime_type))
    blob_key: str = attrs.field(validator=_validated(validate_blob_key))
    session_id: str | None = attrs.field(default=None, validator=_optional_session)
    """The Session a Session-scoped file (an output) belongs to; None for the store's own."""
    output_path: str | None = attrs.field(default=None, validator=_output_path)
    """For a Session output: its path below the outputs mount."""


@attrs.frozen
class StoredFile:
    """A stored file's row. ``size`` and ``sha256`` are set once it is ``ready``."""

    file_id: str
    filename: str
    mime_type: str
    state: FileState
    blob_key: str
    created_at: datetime
    updated_at: datetime
    size: int | None = None
    sha256: str | None = None
    session_id: str | None = None
    output_path: str | None = None

    @property
    def ready(self) -> bool:
        """Whether the content is complete, verified and readable."""
        return self.state is FileState.READY


@attrs.frozen
class BlobInfo:
    """What a store measured while the bytes passed: their count and SHA-256."""

    size: int
    sha256: str


@attrs.frozen
class BlobEntry:
    """One blob found by :meth:`FileStore.scan`."""

    key: str
    size: int
    modified: datetime


class ContentCheck:
    """Counts and hashes bytes as they pass, against what they must be.

    ``update`` raises :class:`ContentMismatch` as soon as more bytes than
    ``size`` arrived (the surplus is never passed on); ``finish`` raises it
    for too few bytes or another digest, and returns the measured
    :class:`BlobInfo`. ``what`` names the content in messages; ``digest=False``
    skips hashing when no ``sha256`` is expected (a read whose consumer
    hashes the bytes itself).
    """

    def __init__(
        self,
        what: str,
        *,
        size: int | None = None,
        sha256: str | None = None,
        digest: bool = True,
    ) -> None:
        if size is not None and size < 0:
            raise InvalidInput(f"size of {what} must be at least 0, got {size}")
        self.what = what
        self.expected_size = size
        self.expected_sha256 = None if sha256 is None else validate_sha256(sha256)
        self.size = 0
        # A read whose caller checks the digest itself need not pay for it twice.
        self._digest = hashlib.sha256() if digest or sha256 is not None else None

    def update(self, chunk: bytes | bytearray | memoryview) -> None:
        """Account for ``chunk``; raise if it takes the total past the expected size."""
        self.size += len(chunk)
        if self.expected_size is not None and self.size > self.expected_size:
            raise ContentMismatch(
                f"{self.what} has more than the {self.expected_size} bytes expected",
                expected_size=self.expected_size,
                size=self.size,
                expected_sha256=self.expected_sha256,
            )
        if self._digest is not None:
            self._digest.update(chunk)

    def finish(self) -> BlobInfo:
        """The measured size and digest; raise :class:`ContentMismatch` if they are wrong.

        With ``digest=False`` and no expected digest the digest is not measured (``""``).
        """
        digest = self._digest.hexdigest() if self._digest is not None else ""
        if self.expected_size is not None and self.size != self.expected_size:
            raise ContentMismatch(
                f"{self.what} has {self.size} bytes, {self.expected_size} expected",
                expected_size=self.expected_size,
                size=self.size,
                expected_sha256=self.expected_sha256,
                sha256=digest,
            )
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            raise ContentMismatch(
                f"{self.what} has SHA-256 {digest}, {self.expected_sha256} expected",
                expected_size=self.expected_size,
                size=self.size,
                expected_sha256=self.expected_sha256,
                sha256=digest,
            )
        return BlobInfo(self.size, digest)


@runtime_checkable
class FileStore(Protocol):
    """Blobs by key: streamed in and out, size and SHA-256 verified, published atomically.

    Keys follow :func:`validate_blob_key` (an invalid key is
    :class:`InvalidInput`). Memory stays O(chunk) whatever the blob's size.
    A store that cannot be reached, or fails transiently, raises
    :class:`~mango.domain.errors.FileStoreUnavailable` (retry); settings it
    cannot work with (a bucket that does not exist, refused credentials, a
    directory it may not write) raise
    :class:`~mango.domain.errors.ConfigurationError`. No message carries a
    credential. The store owns its connections and closes them in
    :meth:`aclose`.
    """

    @property
    def location(self) -> str:
        """Where the blobs are, for messages: a directory or ``s3://bucket/prefix``."""
        ...

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> BlobInfo:
        """Store the bytes of ``chunks`` under ``key`` and return their measured size and digest.

        * Atomic: a reader sees the previous blob under ``key`` (if any) or
          the whole new one, never a part; an existing blob is replaced.
        * With ``size``, a byte past it fails at once and fewer bytes fail at
          the end; with ``sha256``, another digest fails at the end: both
          :class:`ContentMismatch`, and nothing is published.
        * An error raised by ``chunks``, or a cancellation, publishes nothing
          either and propagates unchanged.
        * Durable once it returns (the filesystem store fsyncs the file and
          its directory; S3 has acknowledged the object), and the stored size
          was read back and matched.
        """
        ...

    def open(
        self, key: str, *, size: int | None = None, sha256: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream the blob under ``key``: ``async with store.open(key) as chunks``.

        Raises :class:`FileNotFoundError` on entry if there is no such blob.
        With ``size`` a byte past it raises :class:`ContentMismatch` before
        the chunk holding it is yielded, and a short blob raises at the end;
        with ``sha256`` the digest is checked at the end, raising instead of
        finishing. Act on the content (publish a copy) only once the
        iteration ended without an error. Leaving the block early releases
        the transfer.
        """
        ...

    async def delete(self, key: str) -> bool:
        """Remove the blob under ``key``; True if one was there. Idempotent, durable."""
        ...

    def scan(self, prefix: str) -> AsyncIterator[BlobEntry]:
        """Every blob whose key starts with ``prefix`` (which ends with ``/``), in no set order.

        Leftovers of interrupted puts are never listed: they are not blobs.
        """
        ...

    async def discard_incomplete(self, older_than: timedelta) -> int:
        """Remove leftovers of puts interrupted at least ``older_than`` ago; return how many.

        A store whose backend keeps them out of reach (S3's incomplete
        multipart uploads: a bucket lifecycle rule removes them) returns 0.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's connections. Idempotent."""
        ...


class FileCatalog(Protocol):
    """The rows of stored files (PostgreSQL in production).

    Every state change is a compare-and-set on the row's state, so two
    processes that race (an upload finishing while the reconciler abandons
    it) never both win. Connection failures raise
    :class:`~mango.domain.errors.ProviderUnavailable` (retry).
    """

    async def begin_upload(self, new: NewFile) -> StoredFile:
        """Insert the row in state ``uploading``.

        A Session-scoped file's Session must exist (else
        :class:`~mango.domain.errors.InvalidInput`) and not be fenced (else
        :class:`~mango.domain.errors.SessionDeleting`).
        """
        ...

    async def touch_upload(self, file_id: str) -> bool:
        """Refresh an ``uploading`` row's ``updated_at`` (the upload still runs).

        False if the row is no longer ``uploading`` (the reconciler gave up on it).
        """
        ...

    async def complete_upload(self, file_id: str, info: BlobInfo) -> StoredFile:
        """Move the row from ``uploading`` to ``ready`` with the verified size and digest.

        Raises :class:`~mango.domain.errors.PreconditionFailed` if the row is
        not ``uploading`` any more (the reconciler abandoned a stalled
        upload): the blob just written is a leftover then.
        """
        ...

    async def abandon_upload(self, file_id: str) -> StoredFile | None:
        """Move an ``uploading`` row to ``deleting`` (its upload failed); None if not uploading."""
        ...

    async def get_file(self, file_id: str) -> StoredFile | None:
        """The row in whatever state it is, or None."""
        ...

    async def list_files(self, limit: int = 1000) -> Sequence[StoredFile]:
        """``ready`` rows, oldest first, at most ``limit`` (none if ``limit <= 0``)."""
        ...

    async def begin_delete(self, file_id: str) -> StoredFile | None:
        """Move a ``ready`` row to ``deleting`` and return it; None if there is no row.

        A row in another state comes back unchanged (``uploading``: not the
        caller's to delete; ``deleting``: finish it). Raises
        :class:`~mango.domain.errors.ResourceConflict` while a Session
        resource still refers to the file.
        """
        ...

    async def remove_file(self, file_id: str) -> bool:
        """Delete a ``deleting`` row (its blob is gone); True if it was there."""
        ...

    async def abandon_stale_uploads(self, older_than: timedelta, limit: int = 1000) -> int:
        """Move ``uploading`` rows untouched for ``older_than`` to ``deleting``; return how many."""
        ...

    async def deleting_files(self, limit: int = 1000) -> Sequence[StoredFile]:
        """``deleting`` rows, oldest change first, at most ``limit``."""
        ...

    async def known_blob_keys(self, keys: Sequence[str]) -> frozenset[str]:
        """Which of ``keys`` some row (in any state) names as its blob."""
        ...
