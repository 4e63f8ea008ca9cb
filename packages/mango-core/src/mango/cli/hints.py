"""The ``hint:`` line of every expected failure.

An error that carries its own hint (most do: they know what went wrong) is
shown with it. One that does not gets its class's: what a person can do
about that kind of failure, from the command line. The README promises a
``hint:`` under every ``error:``; an interruption (Ctrl-C, SIGTERM) is the
one failure with no hint, since the person asked for it.
"""

from __future__ import annotations

from mango.domain import errors as e

__all__ = ["OS_ERROR_HINT", "hint_for"]

OS_ERROR_HINT = "check that the path exists and that mango may read or write it"
"""A file of ours (``--from``, ``-o``) could not be opened, read or written."""

# Most specific first: the first class the error is an instance of answers.
_BY_CLASS: tuple[tuple[type[e.MangoError], str], ...] = (
    (e.SandboxNotFound, "delete the session ('mango sessions delete ID') and start a new one"),
    (
        e.FileStoreUnavailable,
        (
            "check the Files store's settings (MANGO_FILE_STORE...) and retry; "
            "'mango doctor' checks each part"
        ),
    ),
    (
        e.ProviderUnavailable,
        "it may pass: retry; 'mango doctor' checks each part, and -v shows every attempt",
    ),
    (e.ProvisioningBlocked, "check the session's state with 'mango sessions list'"),
    (e.PreconditionFailed, "another process changed it at the same moment: retry"),
    (e.PackageSetupInterrupted, "retry: package setup runs again from the start"),
    (e.ResourceConflict, "retry; if it persists, check the resource at the provider"),
    (
        e.StoredFileNotReady,
        "wait for its upload to finish; after a crash, 'mango store reconcile' cleans it up",
    ),
    (e.ContentMismatch, "retry: the bytes changed on the way or at rest"),
    (e.RemoteRejected, "check the provider's settings ('mango providers -v', 'mango doctor')"),
    (e.FileTooLarge, "read it streamed ('mango files read'), or raise MANGO_MAX_READ_BYTES"),
    (e.StoredFileNotFound, "list the stored files with 'mango store ls'"),
    (
        e.InvalidPathError,
        "give a path relative to the workspace, without '..' or a leading '/'",
    ),
    (e.InvalidInput, "check the value named above; every command has --help"),
    (e.PathExists, "choose another destination, or remove it first ('mango files rm')"),
    (
        e.DirectoryNotEmpty,
        "remove it with everything below it ('mango files rm --recursive'), or empty it first",
    ),
    (e.OwnershipError, "check the session's provider with 'mango sessions list'"),
    (e.AdmissionRejected, "'mango providers' shows what each installed provider can do"),
    (
        e.SessionDeleting,
        (
            "wait for the deletion to finish ('mango reconcile' finishes an interrupted one), "
            "then use a new session id"
        ),
    ),
    (e.ConfigurationError, "fix the setting named above; 'mango doctor' checks every setting"),
    (e.UnknownProvider, "'mango providers' lists the installed providers"),
    (e.PackageSetupFailed, "check the package names and the package manager's output above"),
    (e.ToolFailed, "check the tool's arguments"),
    (
        e.InvalidTransition,
        "this is a fault in mango (or in a plugin's lifecycle table): please report it",
    ),
    (
        e.LifecycleTableError,
        "this is a fault in mango (or in a plugin's lifecycle table): please report it",
    ),
    (e.PermanentError, "a retry will not help as things stand; 'mango doctor' checks the set-up"),
)

_ANY = "run the command again with -v to see what mango did"


_STATE_HINTS = {
    # The lifecycle commands a person gives (``mango sessions pause/resume``): refused in a
    # state, they are a wrong moment, not a fault of mango's.
    "pause": (
        "only a Session with a sandbox (state 'bound' or 'paused') can be paused; "
        "'mango sessions list' shows its state, and 'mango exec' gives a new one its sandbox"
    ),
    "resume": (
        "only a Session with a sandbox (state 'bound' or 'paused') can be resumed; "
        "'mango sessions list' shows its state, and 'mango exec' gives a new one its sandbox"
    ),
}


def hint_for(exc: e.MangoError) -> str:
    """``exc``'s own hint, else the one for its kind of failure."""
    if exc.hint:
        return exc.hint
    command = getattr(exc, "command", None) if isinstance(exc, e.InvalidTransition) else None
    if command in _STATE_HINTS:
        return _STATE_HINTS[command]
    for cls, hint in _BY_CLASS:
        if isinstance(exc, cls):
            return hint
    return _ANY
