"""A remote sandbox's view of its provider, and the one rule for "is the sandbox gone?".

A remote provider (E2B, Cube, OpenSandbox, Daytona) has two planes: a control
plane that creates, finds and deletes sandboxes, and a data plane inside each
sandbox (a daemon that runs commands and moves files). A data-plane call that
fails cannot tell by itself whether its sandbox was deleted (by this client,
by another worker, by ``mango sessions delete``, by the vendor) or whether
the daemon merely hiccupped: only the control plane can. Every remote
provider asks it the same way:

* :class:`ProviderView` -- what every sandbox of one provider instance shares
  (the provider's name, the output and read caps, the exec tracker) and the
  one question a sandbox asks of its control plane, :meth:`ProviderView.presence`.
  A provider subclasses it with its clients and settings, makes one per
  provider instance and hands it to every sandbox it opens, instead of a
  bundle of callbacks over its own methods;
* :meth:`ProviderView.lost` -- after a **data-plane** failure (a file call, an
  egress call, a command that never started): :class:`SandboxNotFound` if the
  sandbox is gone, :class:`SandboxNotRunning` if it is paused or stopped,
  else the failure itself;
* :meth:`ProviderView.confirm_missing` -- after a call that answered "not
  found" but cannot tell a paused sandbox from a gone one (E2B's
  ``/timeout`` sees running sandboxes only, a daemon's 404 sees only its own
  host): the same question, whose answer alone decides;
* :meth:`ProviderView.torn_down` -- after a **command** ended the way a
  teardown ends one: the kit's :func:`~mango.provider.execution.torn_down`
  over the same question, so files and exec agree on what "gone" means;
* :meth:`ProviderView.destroy` -- the sandbox's own ``destroy``: mark its
  running commands destroyed (they return ``cancelled=True``), delete it;
* :class:`RemoteSandbox` -- the base of a remote sandbox: ``exec`` and
  ``exec_stream`` (:class:`~mango.provider.execution.StreamedExec`), the file
  methods (:class:`~mango.provider.files.RemoteFiles`), ``ref``, ``spec``,
  ``root`` and ``destroy``, and its caps, all from its ref, spec, path policy
  and provider view.

**Only a confirmed not-found records a loss.** SessionManager marks a
Session lost, irreversibly, when a provider raises :class:`SandboxNotFound`,
so a provider raises it only when its control plane's own lookup of the
sandbox answered "no such sandbox" (a ``GET`` that sees paused sandboxes as
well as running ones, or a record in a deleted state). Every other
not-found goes through :meth:`ProviderView.confirm_missing` first, and a
malformed answer of the control plane (no record, another id, the wrong
types) is a :class:`ProtocolError`: retryable, the binding kept, never a loss.

Only failures cost a control-plane call; a call that succeeds asks nothing.
Stdlib and attrs only.
"""

from __future__ import annotations

import enum
import logging
from typing import ClassVar, NoReturn

import attrs

from mango.domain.errors import (
    FileTooLarge,
    InvalidInput,
    MangoError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxNotRunning,
)
from mango.domain.values import SandboxRef, SandboxSpec
from mango.provider.execution import (
    TEARDOWN_SETTLE_SECONDS,
    ExecTracker,
    StreamedExec,
    checkpoint,
    torn_down,
)
from mango.provider.files import RemoteFiles
from mango.provider.paths import PathPolicy

__all__ = ["Presence", "ProviderView", "RemoteSandbox"]

_LOG = logging.getLogger(__name__)
_DECIDED = (SandboxNotFound, SandboxNotRunning, InvalidInput, FileTooLarge)
"""Errors that say what happened: no control-plane question can change their meaning."""


class Presence(enum.Enum):
    """What the control plane says about one sandbox."""

    RUNNING = "running"
    """It exists and runs (or is starting): a failure of its data plane is the data plane's."""
    STOPPED = "stopped"
    """It exists but is paused, stopped or archived: its workspace is kept; a resume brings it
    back (the next acquire's ``keep_alive`` or ``attach`` does)."""
    GONE = "gone"
    """It no longer exists, or its deletion has begun: its workspace is lost."""


@attrs.define(eq=False, kw_only=True)
class ProviderView:
    """What every sandbox of one provider instance shares, and what it asks the control plane.

    ``name`` is the provider's name (for refs and messages), ``max_output_bytes``
    the per-stream exec cap, ``max_read_bytes`` the bound of a buffered read,
    ``tracker`` the commands running through this provider instance (one for
    all its sandboxes, so the provider's own ``destroy`` reaches them too).

    A subclass adds its clients and settings and implements :meth:`presence`
    and :meth:`remove`; it may refine :meth:`lost` (say, to resume a paused
    sandbox and repeat the call instead).
    """

    name: str
    max_output_bytes: int
    max_read_bytes: int
    tracker: ExecTracker = attrs.field(factory=ExecTracker)

    async def presence(self, sandbox_id: str) -> Presence:
        """One control-plane question about ``sandbox_id``: running, stopped or gone.

        Raising :class:`SandboxNotFound` means :attr:`Presence.GONE`: raise it
        (or answer ``GONE``) only for a confirmed not-found, the control
        plane's own lookup of this sandbox (see the module docstring). An
        answer that is not a record of this sandbox is a :class:`ProtocolError`.
        Any other :class:`MangoError` (an outage, refused credentials, a
        protocol error) means it cannot tell, and the callers keep the error
        they had.
        """
        raise NotImplementedError

    async def remove(self, sandbox_id: str) -> None:
        """Delete ``sandbox_id`` through the control plane; a sandbox already gone is success."""
        raise NotImplementedError

    def not_found(self, sandbox_id: str) -> SandboxNotFound:
        """The :class:`SandboxNotFound` for ``sandbox_id``: one message for every call."""
        return SandboxNotFound(f"{self.name}: sandbox {sandbox_id!r} no longer exists")

    async def gone(self, sandbox_id: str) -> bool:
        """True if the control plane shows ``sandbox_id`` gone or being deleted.

        Raises what :meth:`presence` raises, except :class:`SandboxNotFound` (True).
        """
        try:
            return await self.presence(sandbox_id) is Presence.GONE
        except SandboxNotFound:
            return True

    async def lost(self, sandbox_id: str, error: MangoError) -> MangoError:
        """What a failed data-plane call means: the error to raise in place of ``error``.

        :class:`SandboxNotFound` if the sandbox is gone, :class:`SandboxNotRunning`
        if it is paused or stopped, else ``error`` itself. An error that already
        says what happened (not found, not running, bad input such as a refused
        path, a file too large) is returned as it is, at no cost; so is
        ``error`` when the control plane cannot answer. Any other error is
        asked about, a refusal (a 4xx) too: a daemon may refuse a call because
        its sandbox is paused or being deleted.
        """
        if isinstance(error, _DECIDED):
            return error
        try:
            presence = await self.presence(sandbox_id)
        except SandboxNotFound:
            presence = Presence.GONE
        except MangoError as exc:
            _LOG.debug("could not ask whether sandbox %s is gone: %s", sandbox_id, exc)
            return error
        if presence is Presence.GONE:
            return self.not_found(sandbox_id)
        if presence is Presence.STOPPED:
            return SandboxNotRunning(
                f"{self.name}: sandbox {sandbox_id!r} is paused or stopped; "
                "the next acquire resumes it"
            )
        return error

    async def confirm_missing(self, sandbox_id: str, error: MangoError) -> MangoError:
        """What a not-found from a call that cannot tell paused from gone means.

        The control plane is asked (:meth:`presence`): gone is
        :class:`SandboxNotFound` (confirmed), paused or stopped is
        :class:`SandboxNotRunning` (the caller may resume it and repeat the
        call), running is a :class:`ProviderUnavailable` (the service
        contradicted itself; a retry decides). If the control plane cannot
        answer, the result is a :class:`ProviderUnavailable` naming ``error``:
        never a loss on an unconfirmed word.
        """
        try:
            presence = await self.presence(sandbox_id)
        except SandboxNotFound:
            return self.not_found(sandbox_id)
        except MangoError as exc:
            return ProviderUnavailable(
                f"{error}; and {self.name} could not confirm whether sandbox {sandbox_id!r} "
                f"is gone: {exc}"
            )
        if presence is Presence.GONE:
            return self.not_found(sandbox_id)
        if presence is Presence.STOPPED:
            return SandboxNotRunning(
                f"{self.name}: sandbox {sandbox_id!r} is paused or stopped ({error})"
            )
        return ProviderUnavailable(
            f"{error}; but {self.name} shows sandbox {sandbox_id!r} running (retry)"
        )

    async def fail(self, sandbox_id: str, error: MangoError) -> NoReturn:
        """Raise what :meth:`lost` makes of ``error``: ``error`` itself, or the new one from it."""
        meaning = await self.lost(sandbox_id, error)
        if meaning is error:
            raise error
        raise meaning from error

    async def torn_down(self, sandbox_id: str, *, settle: float = TEARDOWN_SETTLE_SECONDS) -> bool:
        """After a command ended the way a teardown ends one: was its sandbox deleted meanwhile?

        The kit's :func:`~mango.provider.execution.torn_down` over :meth:`gone`
        (asked again for up to ``settle`` seconds while the sandbox still
        looks alive). Ask it only for such ends: a normal exit costs no call.
        """
        return await torn_down(lambda: self.gone(sandbox_id), settle=settle)

    async def destroy(self, sandbox_id: str, *, wait: float = 0.0) -> None:
        """A sandbox's ``destroy``: its running commands end ``cancelled``, then it is deleted.

        With ``wait`` (seconds), also wait that long at most for those commands'
        execs to return. Idempotent: a sandbox already gone is success.
        """
        await checkpoint()
        self.tracker.mark_destroyed(sandbox_id)
        await self.remove(sandbox_id)
        if wait > 0:
            await self.tracker.terminate(sandbox_id, wait)


class RemoteSandbox(StreamedExec, RemoteFiles):
    """Base of a remote sandbox: everything but its exec body and its file API calls.

    The sandbox class (an attrs class) has the attributes ``_ref`` (its
    :class:`SandboxRef`), ``_spec`` (the spec it was created or attached
    with), ``_path_policy`` (whose root is the workspace root) and
    ``_provider`` (its :class:`ProviderView`), and defines ``_exec_body``
    (:class:`~mango.provider.execution.StreamedExec`) and the file hooks
    (:class:`~mango.provider.files.RemoteFiles`). The caps come from the view;
    ``destroy`` is the view's, waiting :attr:`destroy_wait` seconds at most
    for the sandbox's running execs to return.
    """

    __slots__ = ()
    destroy_wait: ClassVar[float] = 0.0
    """How long ``destroy`` waits for the execs it cancelled (0: it does not wait)."""
    _ref: SandboxRef
    _spec: SandboxSpec
    _path_policy: PathPolicy
    _provider: ProviderView

    @property
    def ref(self) -> SandboxRef:
        """``SandboxRef(<provider>, <the vendor's sandbox id>)``."""
        return self._ref

    @property
    def spec(self) -> SandboxSpec:
        """The spec this client was created or attached with."""
        return self._spec

    @property
    def root(self) -> str:
        """The workspace root inside the sandbox (the commands' working directory)."""
        return self._path_policy.root

    @property
    def sandbox_id(self) -> str:
        """The vendor's id of the sandbox."""
        return self._ref.external_id

    def _output_cap(self) -> int:
        return self._provider.max_output_bytes

    def _read_cap(self) -> int:
        return self._provider.max_read_bytes

    async def destroy(self) -> None:
        """Delete the sandbox; idempotent. Running commands end with ``cancelled=True``.

        So do those another provider instance (another worker) runs in it.
        Afterwards attach raises :class:`SandboxNotFound`.
        """
        await self._provider.destroy(self.sandbox_id, wait=self.destroy_wait)
