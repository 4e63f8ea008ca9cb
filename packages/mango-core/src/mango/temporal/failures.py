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
``SandboxNotFound``, ...), a stable name to filter on. The details are

1. the hint (or ``None``), where older clients look for it;
2. a JSON object ``{"mango_error": {"fields": ..., "permanent": ..., "bases": ...}}``:
   the error's constructor arguments as JSON values (every subclass keeps
   them as attributes of the same name: ``AdmissionRejected.reasons``,
   ``UnknownProvider.available``, ``InvalidTransition.state`` / ``command``),
   its verdict, and the names of its mango ancestors, so an error class the
   client does not know (a provider's own subclass) comes back as the nearest
   class it does know. Only fields the error already exposes travel, and
   messages never carry credentials (see :mod:`mango.domain.errors`).

Expected outcomes of a tool call (:class:`~mango.domain.errors.ToolFailed`,
:class:`~mango.domain.errors.InvalidInput`) are marked BENIGN, so workers log
them at DEBUG instead of printing a traceback for each.

Client side, :func:`raise_as_mango_error` finds that failure inside the SDK's
wrappers and raises the matching mango error again, rebuilt through its own
constructor with the same fields, message, hint and verdict.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, NoReturn

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
    ToolFailed,
    is_permanent,
)

__all__ = [
    "error_fields",
    "error_type_for",
    "find_application_error",
    "is_non_retryable",
    "raise_as_mango_error",
    "rebuild_mango_error",
    "to_application_error",
]

_KNOWN: dict[str, type[MangoError]] = {
    name: value
    for name, value in vars(domain_errors).items()
    if isinstance(value, type) and issubclass(value, MangoError)
}
_DETAIL_KEY = "mango_error"
_JSONScalar = str | int | float | bool | None
_SKIP = object()
"""Marks a field that cannot travel as JSON."""


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


def _json_field(value: object) -> Any:
    """``value`` as a JSON value, or :data:`_SKIP` if it is not made of JSON scalars."""
    if isinstance(value, _JSONScalar):
        return value
    if isinstance(value, tuple | list):
        items = [_json_field(item) for item in value]
        return _SKIP if any(item is _SKIP for item in items) else items
    return _SKIP


def _constructor_parameters(cls: type[MangoError]) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [parameter for parameter in parameters if parameter.kind in kinds]


def error_fields(error: MangoError) -> dict[str, Any]:
    """The constructor arguments of ``error`` as JSON values, read from its attributes.

    A parameter without a same-named attribute, or whose value is not made of
    JSON scalars, is left out (the message and hint travel anyway).
    """
    fields: dict[str, Any] = {}
    for parameter in _constructor_parameters(type(error)):
        value = _json_field(getattr(error, parameter.name, _SKIP))
        if value is not _SKIP:
            fields[parameter.name] = value
    return fields


def _structured(error: MangoError) -> dict[str, Any]:
    bases = [cls.__name__ for cls in type(error).__mro__[1:] if issubclass(cls, MangoError)]
    return {
        _DETAIL_KEY: {
            "fields": error_fields(error),
            "permanent": error.permanent,
            "bases": bases,
        }
    }


def to_application_error(exc: BaseException) -> ApplicationError:
    """The :class:`ApplicationError` that carries ``exc`` across the boundary."""
    found = _mango_in_chain(exc)
    message = str(found if found is not None else exc) or type(exc).__name__
    details: tuple[Any, ...] = ()
    if found is not None:
        details = (found.hint, _structured(found))
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
        if isinstance(current, ApplicationError) and _known_class(current) is not None:
            return current
        current = _cause(current)
    return None


def _structured_detail(app: ApplicationError) -> Mapping[str, Any]:
    """The structured detail of ``app`` (empty for failures from older workers)."""
    for detail in app.details[1:2]:
        if isinstance(detail, Mapping) and isinstance(detail.get(_DETAIL_KEY), Mapping):
            found: Mapping[str, Any] = detail[_DETAIL_KEY]
            return found
    return {}


def _known_class(app: ApplicationError) -> type[MangoError] | None:
    """The mango class named by ``app``'s type, else by the nearest ancestor it lists."""
    if app.type in _KNOWN:
        return _KNOWN[app.type]
    bases = _structured_detail(app).get("bases")
    for name in bases if isinstance(bases, list) else ():
        if isinstance(name, str) and name in _KNOWN:
            return _KNOWN[name]
    return None


def rebuild_mango_error(app: ApplicationError) -> MangoError | None:
    """The mango error ``app`` carries, rebuilt with its fields; None if it carries none.

    The class's own constructor runs with the carried fields (so its
    validation and derived attributes hold); if that fails (an ancestor
    standing in for an unknown class, a field that could not travel) the
    error is built from its message and the carried fields are set on it.
    Message, hint and verdict are always the carried ones.
    """
    cls = _known_class(app)
    if cls is None:
        return None
    hint = app.details[0] if app.details and isinstance(app.details[0], str) else None
    detail = _structured_detail(app)
    raw_fields = detail.get("fields")
    fields: Mapping[str, Any] = raw_fields if isinstance(raw_fields, Mapping) else {}
    error: MangoError
    try:
        error = cls(**fields)
    except Exception:  # noqa: BLE001 - any mismatch falls back to the plain rebuild below
        error = cls.__new__(cls)
        MangoError.__init__(error, app.message, hint=hint)
        names = {parameter.name for parameter in _constructor_parameters(cls)}
        for name, value in fields.items():
            if name in names and name not in ("message", "hint"):
                setattr(error, name, tuple(value) if isinstance(value, list) else value)
    error.args = (app.message,)
    error.message = app.message
    error.hint = hint
    permanent = detail.get("permanent")
    if not isinstance(permanent, bool):
        permanent = app.non_retryable and not issubclass(cls, SandboxNotFound)
    if permanent != error.permanent:
        # A subclass the client does not know may carry another verdict than its ancestor.
        error.permanent = permanent
    return error


def raise_as_mango_error(exc: BaseException) -> NoReturn:
    """Re-raise a workflow or update failure as the mango error it carries.

    A failure with no mango error inside is raised as a :class:`MangoError`
    (or :class:`PermanentError` if it was non-retryable) with its message.
    """
    app = find_application_error(exc)
    error = None if app is None else rebuild_mango_error(app)
    if app is None or error is None:
        raise MangoError(_deepest_message(exc)) from exc
    if type(error) is MangoError and error.permanent:
        error = PermanentError(error.message, hint=error.hint)
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
