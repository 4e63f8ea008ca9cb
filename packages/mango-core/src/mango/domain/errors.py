"""The one error tree of mango.

Every error mango raises on purpose is a :class:`MangoError`. Callers decide
what to do from the class and from :attr:`MangoError.permanent`, never from the
message text::

    MangoError                     retryable unless a class below says otherwise
    ├── SandboxNotFound            a persisted reference the provider no longer knows (retryable;
    │   │                          Temporal still stops at once: retrying cannot bring it back)
    │   └── SandboxEvicted         the idle eviction destroyed the sandbox (MANGO_EVICT_IDLE_AFTER)
    ├── ProviderUnavailable        the backend could not be reached or answered badly (retry)
    │   ├── SandboxNotRunning      the sandbox exists but is stopped or paused (start it, retry)
    │   ├── RemoteUnavailable      a remote API failed transiently (5xx, 429, timeout); has status
    │   │   └── ProtocolError      it answered something that is not its protocol (not JSON, ...)
    │   └── FileStoreUnavailable   the Files store (a directory, an S3 endpoint) failed (retry)
    ├── ProvisioningBlocked        intent refused: Session absent, fenced or already bound
    ├── PreconditionFailed         a concurrent change won (compare-and-delete lost, Memory race)
    │   └── MemoryConflict         another Session or API writer changed a memory first; has path
    ├── PackageSetupInterrupted    package setup timed out or was cancelled (retry re-runs it)
    ├── ResourceConflict           the backend refused a change that conflicts with its state (409)
    ├── StoredFileNotReady         a stored file is still uploading (wait, or reconcile a crash)
    ├── ContentMismatch            bytes differ from the size or SHA-256 they must have
    └── PermanentError             a retry on the same worker cannot fix it
        ├── RemoteRejected         a remote API refused the request with a 4xx; has status, excerpt
        ├── FileTooLarge           a file is larger than the read bound; has size, limit
        ├── StoredFileNotFound     no stored file has that id (or it is being deleted)
        ├── InvalidInput           a value at a boundary is malformed (empty id, bad ref, ...)
        │   ├── InvalidPathError   a workspace path breaks the path rules
        │   │   └── PathEscapeError   the path leaves the workspace (.., absolute, symlink)
        │   └── InvalidMemory      a memory breaks the Memory Store limits; has path
        ├── MemoryStoreNotFound    no Memory Store has that id; has store_id
        ├── PathExists             the file API's destination exists already (rename, mkdir)
        ├── DirectoryNotEmpty      a directory to remove has entries; remove it recursively
        ├── ProcessNotFound        no background process has that id in the sandbox; process_id
        ├── OwnershipError         the resource belongs to another Session or provider
        ├── RemovalBlocked         a sandbox removal met a mount point or an immutable file; path
        ├── AdmissionRejected      the spec cannot run on this provider (every reason listed)
        │   ├── CapabilityNotSupported
        │   └── FleetFull          the deployment runs MANGO_MAX_SANDBOXES sandboxes already
        ├── UnsafeArchiveError     an archive tries to escape, link out, or exceed its limits
        │   └── OutputRejected     a Session's outputs cannot be published as they are; has path
        ├── SessionDeleting        the Session is fenced for deletion; no new admissions
        ├── InvalidTransition      the lifecycle state machine refused a command
        ├── LifecycleTableError    a lifecycle table breaks its rules (raised when it is built)
        ├── UnknownProvider        ``MANGO_SANDBOX`` names a provider that is not installed
        ├── ConfigurationError     settings are missing or contradictory
        ├── PackageSetupFailed     a package manager exited non-zero (misspelt package, ...)
        └── ToolFailed             a tool ran but could not do what was asked

Every class states its verdict as the class attribute ``permanent``, set on the
class itself or inherited from :class:`PermanentError` (never left to the
root's default), and the docstring of the class that sets it says why. A
test (``tests/unit/test_error_tree.py``) keeps this tree complete.

Every constructor argument of a subclass is kept as an attribute of the same
name (``AdmissionRejected.reasons``, ``UnknownProvider.available``, ...), so
the error can be rebuilt from its fields on the far side of a process
boundary (:mod:`mango.temporal.failures`). Those fields are JSON values
(strings, numbers, booleans, ``None`` and tuples of them).

``permanent`` is a property every caller can test, and :func:`is_permanent`
walks the ``raise ... from`` chain so a wrapped error keeps its verdict.
Temporal maps permanent errors to non-retryable failures.
Messages never contain credentials.

Over 400 lines on purpose: the whole tree stays in one module, drawn above
and enforced by a test against that drawing, so no error class is defined
anywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AdmissionRejected",
    "CapabilityNotSupported",
    "ConfigurationError",
    "ContentMismatch",
    "DirectoryNotEmpty",
    "FileStoreUnavailable",
    "FileTooLarge",
    "FleetFull",
    "InvalidInput",
    "InvalidMemory",
    "InvalidPathError",
    "InvalidTransition",
    "LifecycleTableError",
    "MangoError",
    "MemoryConflict",
    "MemoryStoreNotFound",
    "OutputRejected",
    "OwnershipError",
    "PackageSetupFailed",
    "PackageSetupInterrupted",
    "PathEscapeError",
    "PathExists",
    "PermanentError",
    "PreconditionFailed",
    "ProcessNotFound",
    "ProtocolError",
    "ProviderUnavailable",
    "ProvisioningBlocked",
    "RemoteRejected",
    "RemoteUnavailable",
    "RemovalBlocked",
    "ResourceConflict",
    "SandboxEvicted",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SessionDeleting",
    "StoredFileNotFound",
    "StoredFileNotReady",
    "ToolFailed",
    "UnknownProvider",
    "UnsafeArchiveError",
    "is_permanent",
]


class MangoError(Exception):
    """Root of every error mango raises on purpose.

    ``hint`` is an optional actionable sentence shown by the command line.
    ``permanent`` is False here: an error that does not say otherwise is
    assumed transient, so a retry is allowed. Subclasses set it explicitly.
    """

    permanent: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class SandboxNotFound(MangoError):
    """A persisted sandbox reference no longer resolves at the provider.

    Never answered by provisioning an empty replacement: the workspace is lost
    and an operator must decide. Release treats it as "already gone".

    Not permanent in the sense of :func:`is_permanent`, because a release or a
    reconcile that meets it has succeeded ("already gone") rather than failed;
    the Temporal boundary still fails the step at once, as no retry brings the
    workspace back.
    """

    permanent = False


class SandboxEvicted(SandboxNotFound):
    """The idle eviction (``MANGO_EVICT_IDLE_AFTER``) destroyed the Session's sandbox.

    A :class:`SandboxNotFound` with its reason: the workspace is gone on
    purpose, not lost, and is never replaced by an empty one either. Not
    permanent, as its parent: a release that meets it has succeeded; no
    retry brings the workspace back, so Temporal fails the step at once.
    ``idle_seconds`` is how long the Session had been unused when it was
    evicted; ``finished`` is False while the destroy is still to be
    confirmed (a provider that could not answer).
    """

    permanent = False

    def __init__(
        self,
        message: str,
        *,
        idle_seconds: float = 0.0,
        finished: bool = True,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.idle_seconds = idle_seconds
        self.finished = finished


class ProviderUnavailable(MangoError):
    """The backend could not be reached or answered with a transient failure.

    Retryable: daemons restart, networks recover, quotas refill.
    """

    permanent = False


class SandboxNotRunning(ProviderUnavailable):
    """The sandbox exists but is stopped or paused, so a command could not start.

    Retryable: the provider (or the caller) starts or resumes the sandbox and
    tries again; providers raise :class:`ProviderUnavailable` instead if it
    will not stay up.
    """

    permanent = False


class ProvisioningBlocked(MangoError):
    """An intent could not be written: the Session is absent, fenced, or already bound.

    The caller re-reads the binding before concluding anything. Retryable: the
    re-read usually finds the binding another worker published.
    """

    permanent = False


class PreconditionFailed(MangoError):
    """A compare-and-set lost against a concurrent change.

    Retryable: the next attempt reads the new state and decides again.
    """

    permanent = False


class MemoryConflict(PreconditionFailed):
    """A memory changed (in another Session, or through the API) since the baseline a change
    was made against; never overwritten silently.

    Retryable like every precondition (the next wave starts from the new
    heads), though the stale change itself is discarded. ``path`` is the
    memory's path in its store (``/notes.md``).
    """

    permanent = False

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class PackageSetupInterrupted(MangoError):
    """Package setup did not finish: a command timed out or was cancelled.

    Retryable: a slow mirror or a sandbox destroyed under the installer says
    nothing about the plan itself. The sandbox stays unbound and the retry
    runs setup again (provider failures during setup stay
    :class:`ProviderUnavailable`, retryable too).
    """

    permanent = False


class ResourceConflict(MangoError):
    """The backend refused a change that conflicts with the resource's current state.

    HTTP 409 from a remote API: a name already taken, a sandbox in the wrong
    state for the call. Not permanent by itself; the caller re-reads the
    resource and decides (attach to the existing one, wait, or give up).
    """

    permanent = False


class RemoteUnavailable(ProviderUnavailable):
    """The remote API could not be reached or answered with a transient failure.

    ``status`` is the HTTP status (``None`` when no response arrived);
    ``retry_after`` the server's ``Retry-After`` in seconds, if it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.retry_after = retry_after


class ProtocolError(RemoteUnavailable):
    """A remote API answered something that is not its protocol.

    A 200 whose body is not JSON, truncated JSON, JSON of the wrong shape, a
    record without the id that was asked for, a body past the bound mango
    reads: a proxy or a server that is not the vendor's API answered, or the
    vendor's answer broke on the way. It never means the sandbox is gone, so
    it never records a loss, and it says so instead of blaming ownership.

    Retryable, as every :class:`ProviderUnavailable` (the binding is kept and
    a later attempt may meet the real service again), but not retried inside
    one call: the same server answers the same way a second later. ``status``
    is the HTTP status of the answer that broke the protocol.
    """

    permanent = False


class FileStoreUnavailable(ProviderUnavailable):
    """The Files store could not be reached or failed transiently.

    A directory that cannot be written right now (disk full), an S3 endpoint
    that refuses connections, times out or answers 5xx. Retryable, as every
    :class:`ProviderUnavailable`: the store comes back and the same call works.
    """

    permanent = False


class StoredFileNotReady(MangoError):
    """The stored file exists but is still uploading, so it cannot be read yet.

    Retryable: the upload finishes (and the file becomes readable) or fails
    (and the reconciler removes it, after which the id is not found).
    """

    permanent = False


class ContentMismatch(MangoError):
    """Bytes differ from the size or SHA-256 they were declared or recorded with.

    Raised by a put whose input is not what its caller announced (a source
    file that changed while it was read) and by a read whose blob is not what
    was recorded (a store that lost, cut or altered it); nothing is published
    or trusted in either case. Retryable: a re-sent upload or a re-read of a
    cut transfer can succeed; a damaged blob keeps failing the same way,
    loudly, and is never served as if it were whole.

    ``expected_size`` / ``size`` and ``expected_sha256`` / ``sha256`` say
    what was wanted and what came (``None``: not known or not checked;
    ``size=None`` with an expected size: no content at all).
    """

    permanent = False

    def __init__(
        self,
        message: str,
        *,
        expected_size: int | None = None,
        size: int | None = None,
        expected_sha256: str | None = None,
        sha256: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.expected_size = expected_size
        self.size = size
        self.expected_sha256 = expected_sha256
        self.sha256 = sha256


class PermanentError(MangoError):
    """Configuration or ownership that a retry on the same worker cannot fix.

    Every subclass inherits ``permanent = True``: each describes a request
    that fails the same way until a person or the caller changes it.
    """

    permanent = True


class FileTooLarge(PermanentError):
    """A file is larger than the bound a buffered read accepts.

    Permanent for that bound: the same read fails the same way. ``size`` is
    the file's size when it was checked (or the bytes seen so far, for a file
    that grew), ``limit`` the bound; stream the file with ``open_file``
    instead, or raise the bound.
    """

    def __init__(self, message: str, *, size: int, limit: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.size = size
        self.limit = limit


class StoredFileNotFound(PermanentError):
    """No stored file has this id, or the file is being deleted.

    Permanent: ids are never reused, so the same id is not found again.
    ``file_id`` is the id that was asked for.
    """

    def __init__(self, file_id: str, *, hint: str | None = None) -> None:
        self.file_id = file_id
        super().__init__(
            f"no stored file {file_id!r}",
            hint=hint or "list the stored files with 'mango store ls'",
        )


class RemoteRejected(PermanentError):
    """The remote API refused the request with a 4xx that a retry cannot fix.

    ``status`` is the HTTP status, ``excerpt`` a short, credential-free start
    of the response body (the vendor's reason).
    """

    def __init__(self, message: str, *, status: int, excerpt: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.excerpt = excerpt


class InvalidInput(PermanentError):
    """A value crossing a boundary is malformed; the message says which and why."""


class InvalidPathError(InvalidInput):
    """A workspace path breaks the path rules (NUL, control characters, length)."""


class PathEscapeError(InvalidPathError):
    """A path would leave the workspace: ``..``, an absolute path, or a symlink."""


class InvalidMemory(InvalidInput):
    """A memory breaks the Memory Store limits: its path, its size, its text, the file count.

    Permanent: the same content fails the same way. ``path`` names the file
    (``/notes.md``; the store's root ``/`` for a limit of the whole store).
    """

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class MemoryStoreNotFound(PermanentError):
    """No Memory Store has this id.

    Permanent: ids are never reused. ``store_id`` is the id that was asked for.
    """

    def __init__(self, store_id: str, *, hint: str | None = None) -> None:
        self.store_id = store_id
        super().__init__(
            f"no memory store {store_id!r}",
            hint=hint or "list the memory stores with 'mango memory ls'",
        )


class PathExists(PermanentError):
    """The file API's destination already exists (a rename target, a directory to make)."""


class DirectoryNotEmpty(PermanentError):
    """A directory to remove has entries and the removal was not recursive."""


class ProcessNotFound(PermanentError):
    """No background process with this id was started in the sandbox.

    Permanent: process ids are never reused within a sandbox. ``process_id``
    is the id that was asked for.
    """

    def __init__(self, process_id: str, *, hint: str | None = None) -> None:
        self.process_id = process_id
        super().__init__(
            f"no background process {process_id!r} in this sandbox",
            hint=hint or "list the Session's processes with 'mango processes ls --session ID'",
        )


class OwnershipError(PermanentError):
    """The resource belongs to another Session key or another provider."""


class RemovalBlocked(PermanentError):
    """Deleting a sandbox met something it must not or cannot remove; an operator must act.

    A mount point inside the sandbox's directory (removing through it would
    erase the mounted data, so the removal never crosses one) or a file the
    kernel will not let go (immutable or append-only, ``chattr +i``/``+a``).
    Permanent: every retry meets the same obstacle until someone clears it.
    ``path`` names it and ``hint`` says how (``umount PATH``, ``chattr -i
    PATH``); the Session stays fenced, and deleting it again (or the
    reconciler) finishes once the obstacle is gone.
    """

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class AdmissionRejected(PermanentError):
    """The spec is not admissible for the provider; ``reasons`` lists every reason."""

    def __init__(self, provider: str, reasons: Iterable[str], *, hint: str | None = None) -> None:
        self.provider = provider
        self.reasons: tuple[str, ...] = tuple(reasons)
        joined = "; ".join(self.reasons) if self.reasons else "no reason given"
        super().__init__(f"provider {provider!r} cannot run this sandbox: {joined}", hint=hint)


class CapabilityNotSupported(AdmissionRejected):
    """At least one reason is a capability the provider does not declare."""


class FleetFull(AdmissionRejected):
    """The deployment already runs ``limit`` live sandboxes (``MANGO_MAX_SANDBOXES``).

    Checked in PostgreSQL when a provisioning reserves its place, so no race
    lets two workers exceed it; the refused acquire leaves no intent and no
    sandbox behind. Permanent for this request (it fails at once with this
    message rather than waiting): the caller retries once a Session is
    deleted or evicted.
    """

    def __init__(self, limit: int, *, provider: str = "", hint: str | None = None) -> None:
        self.limit = limit
        reason = (
            f"the deployment already runs {limit} live sandbox(es), "
            f"its limit (MANGO_MAX_SANDBOXES={limit})"
        )
        super().__init__(
            provider,
            [reason],
            hint=hint
            or "delete Sessions that are done (mango sessions delete), let the idle eviction "
            "reclaim unused ones, or raise MANGO_MAX_SANDBOXES",
        )


class UnsafeArchiveError(PermanentError):
    """An archive member escapes its root, is a link or device, or breaks a limit."""


class OutputRejected(UnsafeArchiveError):
    """A Session's outputs directory holds something that cannot be published as it is.

    A symlink, hardlink, device or FIFO; a name that is not UTF-8, holds a
    control character or climbs out; more files or a larger file than the
    limits; a file that changed while it was exported. Permanent: publishing
    the same directory fails the same way until a command in the sandbox
    changes it, so a retry loop would never end. Nothing was published.
    ``path`` names the entry at fault (as the archive spelt it, ``repr``-quoted
    where it is not printable), ``None`` when no one entry is.
    """

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class SessionDeleting(PermanentError):
    """The Session is fenced for deletion; it admits no new sandbox work."""


class InvalidTransition(PermanentError):
    """The lifecycle state machine refused a command in the current state."""

    def __init__(self, state: str, command: str) -> None:
        self.state = state
        self.command = command
        super().__init__(f"cannot {command} a Session in state {state!r}")


class LifecycleTableError(PermanentError):
    """A lifecycle table breaks its rules; ``reasons`` lists every broken rule.

    Raised when the table is built (the default one at import) or when an
    interpreter is given handlers that do not fit it: a programming error
    that no retry fixes.
    """

    def __init__(self, reasons: Iterable[str], *, hint: str | None = None) -> None:
        self.reasons: tuple[str, ...] = tuple(reasons)
        joined = "; ".join(self.reasons) if self.reasons else "no reason given"
        super().__init__(f"the lifecycle table breaks its rules: {joined}", hint=hint)


class UnknownProvider(PermanentError):
    """The selected provider name is not installed."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available: tuple[str, ...] = tuple(sorted(available))
        listing = ", ".join(self.available) or "none"
        super().__init__(
            f"unknown sandbox provider {name!r} (installed: {listing})",
            hint="set MANGO_SANDBOX to one of the installed names, or install the plugin",
        )


class ConfigurationError(PermanentError):
    """Settings are missing, malformed or contradictory."""


class PackageSetupFailed(PermanentError):
    """A package manager exited non-zero while installing the spec's package plan.

    Permanent: a misspelt package or a manager missing from the image fails
    the same way every time, so retrying would loop forever. The sandbox stays
    unbound; fix the plan (a new spec) or the image.
    """


class ToolFailed(PermanentError):
    """A tool ran but could not do what was asked (no such file, no unique match, ...).

    Permanent: the same call on the same workspace gives the same answer; the
    model reads the message and changes its call instead.
    """


def is_permanent(exc: BaseException) -> bool:
    """Return whether ``exc`` is permanent.

    The first :class:`MangoError` met along the explicit ``raise ... from``
    chain decides, so a foreign wrapper (``RuntimeError(...) from
    OwnershipError(...)``) keeps the verdict of what it wraps. Implicit context
    (an error raised while handling another) does not count.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MangoError):
            return current.permanent
        current = current.__cause__
    return False
