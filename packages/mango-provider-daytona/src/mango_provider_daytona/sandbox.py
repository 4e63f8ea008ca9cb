"""The client for one Daytona sandbox: exec and files through its toolbox."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from mango.provider import (
    Command,
    ExecResult,
    Location,
    MangoError,
    PathPolicy,
    ResolvedPath,
    SandboxRef,
    SandboxSpec,
    StatCallback,
)
from mango.provider.files import Download
from mango.provider.output import ExecChannel
from mango.provider.remote import RemoteSandbox
from mango.provider.shellprocesses import ShellProcesses
from mango_provider_daytona.api import Toolbox
from mango_provider_daytona.execution import TEARDOWN_SETTLE_SECONDS, run_command
from mango_provider_daytona.files import classified, file_part
from mango_provider_daytona.remote import DaytonaRemote
from mango_provider_daytona.scripts import classify_line, parse_classification

__all__ = ["PROCESS_ROOT", "SESSION_PREFIX", "DaytonaSandbox"]

PROCESS_ROOT = "/tmp/.mango-processes"  # noqa: S108 - the sandbox's own /tmp
"""The background-process table: the sandbox user (not root) may write there, as the exec
wrapper's control files do."""
SESSION_PREFIX = "mango-"
"""A background process runs in the session ``mango-<process id>``."""


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class DaytonaSandbox(RemoteSandbox, ShellProcesses):
    """One Daytona sandbox, obtained from :class:`~mango_provider_daytona.DaytonaProvider`.

    Commands run through the toolbox (see :mod:`mango_provider_daytona.execution`);
    output arrives when the command ends. Background processes run in a
    session of their own (create session, execute with ``runAsync``; the
    session is deleted after a kill) under the kit's supervisor
    (:mod:`mango.provider.shellprocesses`), whose table lives in
    :data:`PROCESS_ROOT`. ``command.cwd`` is entered below
    :attr:`root` (missing directories created, symlinks refused). Files are
    the kit's :class:`~mango.provider.files.RemoteFiles` over the toolbox (see
    :mod:`mango_provider_daytona.files`). The sandbox keeps the spec it was
    created or attached with.
    """

    _provider: DaytonaRemote = attrs.field(repr=False)
    _ref: SandboxRef
    _spec: SandboxSpec
    _root: str
    """The sandbox user's home directory (``/home/daytona`` in Daytona's images)."""
    _toolbox: Toolbox = attrs.field(repr=False)
    _fresh_seconds: float = 30.0
    _path_policy: PathPolicy = attrs.field(
        init=False,
        repr=False,
        default=attrs.Factory(lambda self: PathPolicy(self._root), takes_self=True),
    )
    _seen: list[float] = attrs.field(factory=lambda: [float("-inf")], repr=False)
    """When the toolbox last answered a command (monotonic); a one-slot list: attrs is frozen."""

    @property
    def path_policy(self) -> PathPolicy:
        """Workspace-relative paths under :attr:`root`; the wrapper's directories unreachable."""
        return self._path_policy

    async def _lost(self, error: MangoError) -> MangoError:
        """What a failed toolbox call means (gone, stopped, or the call failed)."""
        self._seen[0] = float("-inf")
        return await self._provider.lost(self.sandbox_id, error)

    async def _torn_down(self) -> bool:
        return await self._provider.torn_down(self.sandbox_id, settle=TEARDOWN_SETTLE_SECONDS)

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._provider.tracker.track(self.sandbox_id) as handle:
            result = await run_command(
                self._toolbox,
                command,
                root=self.root,
                timeout=timeout,
                channel=channel,
                handle=handle,
                diagnose=self._lost,
                torn_down=self._torn_down,
            )
        if not result.cancelled:
            self._seen[0] = time.monotonic()
        return result

    _process_root = PROCESS_ROOT

    async def _launch(self, line: str, process_id: str) -> str | None:
        session = SESSION_PREFIX + process_id
        await self._toolbox.create_session(session)
        await self._toolbox.execute_async(session, line)
        return None

    async def _forget(self, process_id: str) -> None:
        await self._toolbox.delete_session(SESSION_PREFIX + process_id)

    async def keep_alive(self) -> None:
        """Start the sandbox if Daytona paused, stopped or archived it, and restart its idle clock.

        A sandbox whose toolbox answered a command less than ``fresh_seconds``
        ago is running and its idle clock was just restarted by that command
        (Daytona counts toolbox calls as activity; auto-pause needs at least a
        minute of idleness), so that case costs no request. Raises
        :class:`~mango.provider.SandboxNotFound` if it is gone.
        """
        if time.monotonic() - self._seen[0] < self._fresh_seconds:
            return
        await self._provider.resume(self.sandbox_id)
        self._seen[0] = time.monotonic()

    # ------------------------------------------------------------------ files (the kit's)

    async def _stat_for(self, location: Location) -> StatCallback:
        # The toolbox's stat follows links: one shell test classifies every component.
        paths = location.prefixes()
        _code, text = await self._toolbox.execute(classify_line(paths), timeout=60)
        return classified(dict(zip(paths, parse_classification(text, len(paths)), strict=True)))

    @asynccontextmanager
    async def _download(self, resolved: ResolvedPath, path: str) -> AsyncIterator[Download]:
        async with (
            self._toolbox.download(resolved.path) as response,
            file_part(response, path) as part,
        ):
            yield Download(aiter(part), part.length)

    async def _make_dirs(self, paths: tuple[str, ...]) -> None:
        # The toolbox's folder call is mkdir -p: the innermost creates them all.
        await self._toolbox.make_dir(paths[-1])

    async def _upload(self, path: str, data: bytes) -> None:
        await self._toolbox.upload(path, data)
