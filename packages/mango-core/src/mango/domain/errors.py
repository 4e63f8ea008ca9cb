"""The one error tree of mango.

Every error mango raises on purpose is a :class:`MangoError`. Callers decide
what to do from the class and from :attr:`MangoError.permanent`, never from the
message text::

    MangoError
    ├── SandboxNotFound            a persisted reference the provider no longer knows
    ├── ProviderUnavailable        the backend could not be reached or answered badly (retry)
    ├── ProvisioningBlocked        intent refused: Session absent, fenced or already bound
    ├── PreconditionFailed         a concurrent change won (compare-and-delete lost, Memory race)
    ├── ResourceConflict           the backend refused a change that conflicts with its state (409)
    └── PermanentError             a retry on the same worker cannot fix it
        ├── InvalidInput           a value at a boundary is malformed (empty id, bad ref, ...)
        │   └── InvalidPathError   a workspace path breaks the path rules
        │       └── PathEscapeError   the path leaves the workspace (.., absolute, symlink)
        ├── OwnershipError         the resource belongs to another Session or provider
        ├── AdmissionRejected      the spec cannot run on this provider (every reason listed)
        │   └── CapabilityNotSupported
        ├── UnsafeArchiveError     an archive tries to escape, link out, or exceed its limits
        ├── SessionDeleting        the Session is fenced for deletion; no new admissions
        ├── InvalidTransition      the lifecycle state machine refused a command
        ├── UnknownProvider        ``MANGO_SANDBOX`` names a provider that is not installed
        └── ConfigurationError     settings are missing or contradictory

``permanent`` is a property every caller can test, and :func:`is_permanent`
walks the ``raise ... from`` chain so a wrapped error keeps its verdict.
Temporal maps permanent errors to non-retryable failures.
Messages never contain credentials.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AdmissionRejected",
    "CapabilityNotSupported",
    "ConfigurationError",
    "InvalidInput",
    "InvalidPathError",
    "InvalidTransition",
    "MangoError",
    "OwnershipError",
    "PathEscapeError",
    "PermanentError",
    "PreconditionFailed",
    "ProviderUnavailable",
    "ProvisioningBlocked",
    "ResourceConflict",
    "SandboxNotFound",
    "SessionDeleting",
    "UnknownProvider",
    "UnsafeArchiveError",
    "is_permanent",
]


class MangoError(Exception):
    """Root of every error mango raises on purpose.

    ``hint`` is an optional actionable sentence shown by the command line.
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
    """


class ProviderUnavailable(MangoError):
    """The backend could not be reached or answered with a transient failure; retry."""


class ProvisioningBlocked(MangoError):
    """An intent could not be written: the Session is absent, fenced, or already bound.

    The caller re-reads the binding before concluding anything.
    """


class PreconditionFailed(MangoError):
    """A compare-and-set lost against a concurrent change."""


class ResourceConflict(MangoError):
    """The backend refused a change that conflicts with the resource's current state.

    HTTP 409 from a remote API: a name already taken, a sandbox in the wrong
    state for the call. Not permanent by itself; the caller re-reads the
    resource and decides (attach to the existing one, wait, or give up).
    """


class PermanentError(MangoError):
    """Configuration or ownership that a retry on the same worker cannot fix."""

    permanent = True


class InvalidInput(PermanentError):
    """A value crossing a boundary is malformed; the message says which and why."""


class InvalidPathError(InvalidInput):
    """A workspace path breaks the path rules (NUL, control characters, length)."""


class PathEscapeError(InvalidPathError):
    """A path would leave the workspace: ``..``, an absolute path, or a symlink."""


class OwnershipError(PermanentError):
    """The resource belongs to another Session key or another provider."""


class AdmissionRejected(PermanentError):
    """The spec is not admissible for the provider; ``reasons`` lists every reason."""

    def __init__(self, provider: str, reasons: Iterable[str], *, hint: str | None = None) -> None:
        self.provider = provider
        self.reasons: tuple[str, ...] = tuple(reasons)
        joined = "; ".join(self.reasons) if self.reasons else "no reason given"
        super().__init__(f"provider {provider!r} cannot run this sandbox: {joined}", hint=hint)


class CapabilityNotSupported(AdmissionRejected):
    """At least one reason is a capability the provider does not declare."""


class UnsafeArchiveError(PermanentError):
    """An archive member escapes its root, is a link or device, or breaks a limit."""


class SessionDeleting(PermanentError):
    """The Session is fenced for deletion; it admits no new sandbox work."""


class InvalidTransition(PermanentError):
    """The lifecycle state machine refused a command in the current state."""

    def __init__(self, state: str, command: str) -> None:
        self.state = state
        self.command = command
        super().__init__(f"cannot {command} a Session in state {state!r}")


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
