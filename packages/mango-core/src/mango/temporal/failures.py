"""mango errors across the Temporal boundary, in one place.

Activity side, :func:`to_application_error`:

* a permanent error (:func:`~mango.domain.errors.is_permanent`: invalid input,
  ownership, admission, a fenced Session, a failed tool) becomes
  ``ApplicationError(non_retryable=True)``;
* :class:`~mango.domain.errors.SandboxNotFound` too: a lost workspace is never
  replaced by an empty one, and retrying cannot bring it back, so the step
  fails at once with a message telling the operator what happened;
* anything else (:class:`~mango.domain.errors.ProviderUnavailable`, a lost
  compare-and-set) stays retryable.

The ``type`` is the mango error's class name (``OwnershipError``,
``SandboxNotFound``, ...), a stable name to filter on; the hint rides along as
the first detail. Expected outcomes of a tool call (:class:`ToolFailed`,
:class:`~mango.domain.errors.InvalidInput`) are marked BENIGN, so workers log
them at DEBUG instead of printing a traceback for each.

Client side, :func:`raise_as_mango_error` finds that failure inside the SDK's
wrappers and raises the matching mango error again.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
)

import mango.domain.errors as domain_errors
from mango.domain.errors import (
    InvalidInput,
    MangoError,
    PermanentError,
    SandboxNotFound,
    is_permanent,
)
from mango.temporal.tools import ToolFailed

__all__ = [
    "error_type_for",
    "find_application_error",
    "is_non_retryable",
    "raise_as_mango_error",
    "to_application_error",
]

_KNOWN: dict[str, type[MangoError]] = {
    name: value
    for name, value in vars(domain_errors).items()
    if isinstance(value, type) and issubclass(value, MangoError)
}
_KNOWN[ToolFailed.__name__] = ToolFailed


def _mango_in_chain(exc: BaseException) -> MangoError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MangoError):
            return current
        current = current.__cause__
    return None


def is_non_retryable(exc: BaseException) -> bool:
    """True for permanent errors and lost sandboxes (along the ``raise ... from`` chain)."""
    found = _mango_in_chain(exc)
    return is_permanent(exc) or isinstance(found, SandboxNotFound)


def error_type_for(exc: BaseException) -> str:
    """The failure type name: the first mango error's class name, else the exception's."""
    found = _mango_in_chain(exc)
    return type(found if found is not None else exc).__name__


def to_application_error(exc: BaseException) -> ApplicationError:
    """The :class:`ApplicationError` that carries ``exc`` across the boundary."""
    found = _mango_in_chain(exc)
    message = str(found if found is not None else exc) or type(exc).__name__
    hint = found.hint if found is not None else None
    details = (hint,) if hint else ()
    benign = isinstance(found, ToolFailed | InvalidInput)
    return ApplicationError(
        message,
        *details,
        type=error_type_for(exc),
        non_retryable=is_non_retryable(exc),
        category=ApplicationErrorCategory.BENIGN
        if benign
        else ApplicationErrorCategory.UNSPECIFIED,
    )


def find_application_error(exc: BaseException) -> ApplicationError | None:
    """The outermost :class:`ApplicationError` with a mango type inside SDK wrappers.

    Outermost, because that is the one :func:`to_application_error` made; the
    errors it was raised from follow as its causes.
    """
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ApplicationError) and current.type in _KNOWN:
            return current
        current = _cause(current)
    return None


def raise_as_mango_error(exc: BaseException) -> NoReturn:
    """Re-raise a workflow or update failure as the mango error it carries.

    A failure with no mango error inside is raised as a :class:`MangoError`
    (or :class:`PermanentError` if it was non-retryable) with its message.
    """
    app = find_application_error(exc)
    if app is None:
        message = _deepest_message(exc)
        raise MangoError(message) from exc
    cls = _KNOWN[app.type or ""]
    hint = app.details[0] if app.details and isinstance(app.details[0], str) else None
    # Bypass subclass constructors with extra arguments (AdmissionRejected, ...):
    # only the message and hint travel.
    error = cls.__new__(cls)
    MangoError.__init__(error, app.message, hint=hint)
    if not isinstance(error, PermanentError) and app.non_retryable and cls is MangoError:
        error = PermanentError(app.message, hint=hint)
    raise error from exc


def _cause(exc: BaseException) -> BaseException | None:
    """The next error down: the SDK's ``cause`` (failures, workflow errors) or ``__cause__``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc.__cause__


def _deepest_message(exc: BaseException) -> str:
    """The first message below the SDK's generic wrappers ("Workflow update failed", ...)."""
    wrappers = (ActivityError, WorkflowFailureError, WorkflowUpdateFailedError)
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if not isinstance(current, wrappers) and str(current):
            return str(current)
        current = _cause(current)
    return str(exc) or type(exc).__name__
