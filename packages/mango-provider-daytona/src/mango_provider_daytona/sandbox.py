"""The client for one Daytona sandbox: exec and files through its toolbox."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs

from mango.provider import (
    Command,
    ExecResult,
    InvalidInput,
    MangoError,
    PathPolicy,
    SandboxRef,
    SandboxSpec,
)
from mango.provider.execution import ExecTracker, StreamedExec
from mango.provider.output import ExecChannel
from mango.provider.reads import read_limit
from mango_provider_daytona.api import DaytonaApi, Toolbox
from mango_provider_daytona.execution import run_command
from mango_provider_daytona.files import classified, file_part, read_bounded
from mango_provider_daytona.scripts import classify_line, parse_classification

__all__ = ["DaytonaSandbox"]

Diagnose = Callable[[str, MangoError], Awaitable[MangoError]]
Resume = Callable[[str], Awaitable[None]]
Gone = Callable[[str], Awaitable[bool]]


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class DaytonaSandbox(StreamedExec):
    """One Daytona sandbox, obtained from :class:`~mango_provider_daytona.DaytonaProvider`.

    Commands run through the toolbox (see :mod:`mango_provider_daytona.execution`);
    output arrives when the command ends. ``command.cwd`` is entered below
    :attr:`root` (missing directories created, symlinks refused). Files follow
    the kit's path policy (see :mod:`mango_provider_daytona.files`). The
    sandbox keeps the spec it was created or attached with.
    """

    _ref: SandboxRef
    _spec: SandboxSpec
    _root: str
    _toolbox: Toolbox = attrs.field(repr=False)
    _api: DaytonaApi = attrs.field(repr=False)
    _max_output_bytes: int
    _max_read_bytes: int
    _tracker: ExecTracker = attrs.field(repr=False)
    _diagnose: Diagnose = attrs.field(repr=False)
    _resume: Resume = attrs.field(repr=False)
    _gone: Gone = attrs.field(repr=False)
    _fresh_seconds: float = 30.0
    _seen: list[float] = attrs.field(factory=lambda: [float("-inf")], repr=False)
    """When the toolbox last answered a command (monotonic); a one-slot list: attrs is frozen."""

    @property
    def ref(self) -> SandboxRef:
        """``SandboxRef("daytona", <sandbox id>)``."""
        return self._ref

    @property
    def root(self) -> str:
        """The sandbox user's home directory (``/home/daytona`` in Daytona's images)."""
        return self._root

    @property
    def spec(self) -> SandboxSpec:
        """The spec this client was created or attached with."""
        return self._spec

    @property
    def sandbox_id(self) -> str:
        """Daytona's id of the sandbox."""
        return self._ref.external_id

    @property
    def path_policy(self) -> PathPolicy:
        """Workspace-relative paths under :attr:`root`; the wrapper's directories unreachable."""
        return PathPolicy(self._root)

    async def _why(self, exc: MangoError) -> MangoError:
        self._seen[0] = float("-inf")
        return await self._diagnose(self.sandbox_id, exc)

    async def _deleted(self) -> bool:
        return await self._gone(self.sandbox_id)

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._tracker.track(self.sandbox_id) as handle:
            result = await run_command(
                self._toolbox,
                command,
                root=self._root,
                timeout=timeout,
                channel=channel,
                handle=handle,
                diagnose=self._why,
                gone=self._deleted,
            )
        if not result.cancelled:
            self._seen[0] = time.monotonic()
        return result

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
        await self._resume(self.sandbox_id)
        self._seen[0] = time.monotonic()

    # ------------------------------------------------------------------ files

    async def _classify(self, paths: tuple[str, ...]) -> dict[str, str]:
        try:
            _code, text = await self._toolbox.execute(classify_line(paths), timeout=60)
        except MangoError as exc:
            raise await self._why(exc) from exc
        return dict(zip(paths, parse_classification(text, len(paths)), strict=True))

    async def _resolve_read(self, path: str) -> str:
        policy = self.path_policy
        location = policy.locate(path)
        await asyncio.sleep(0)
        kinds = await self._classify(location.prefixes())
        resolved = await policy.resolve_read(path, classified(kinds))
        return resolved.path

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of the regular file ``path``, at most ``max_bytes`` of them.

        ``max_bytes=None`` means the provider's read bound. Raises
        :class:`~mango.provider.FileTooLarge` past it (checked on the size the
        toolbox announces, then while reading), :class:`FileNotFoundError`,
        :class:`~mango.provider.PathEscapeError` for escapes and symlinks, and
        :class:`~mango.provider.PermanentError` for a non-regular file.
        """
        limit = read_limit(max_bytes, self._max_read_bytes)
        target = await self._resolve_read(path)
        try:
            async with (
                self._toolbox.download(target) as response,
                file_part(response, path) as part,
            ):
                return await read_bounded(part, path=path, limit=limit)
        except MangoError as exc:
            if exc.permanent:
                raise
            raise await self._why(exc) from exc

    @asynccontextmanager
    async def _open(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        target = await self._resolve_read(path)
        async with self._toolbox.download(target) as response, file_part(response, path) as part:
            yield aiter(part)

    def open_file(self, path: str) -> Any:
        """Stream the regular file ``path`` in chunks (``async with sb.open_file(p) as chunks``).

        Memory stays O(chunk); the same path rules and errors as :meth:`read_file`.
        """
        return self._open(path)

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data``, creating parent directories (mode 0755).

        Never writes through a symlink (:class:`~mango.provider.PathEscapeError`);
        a directory or other non-regular target raises :class:`~mango.provider.PermanentError`.
        """
        policy = self.path_policy
        location = policy.locate(path, write=True)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"write_file() takes bytes, got {type(data).__name__}")
        payload = bytes(data)
        await asyncio.sleep(0)
        kinds = await self._classify(location.prefixes())
        resolved = await policy.resolve_write(path, classified(kinds))
        try:
            if resolved.missing_dirs:
                # The toolbox's folder call is mkdir -p: the innermost creates them all.
                await self._toolbox.make_dir(resolved.missing_dirs[-1])
            await self._toolbox.upload(resolved.path, payload)
        except MangoError as exc:
            if exc.permanent:
                raise
            raise await self._why(exc) from exc

    async def destroy(self) -> None:
        """Delete the sandbox; idempotent. Running commands end with ``cancelled=True``.

        So do those that another provider instance (another worker) runs in it.
        Afterwards attach raises :class:`~mango.provider.SandboxNotFound`.
        """
        await asyncio.sleep(0)
        self._tracker.mark_destroyed(self.sandbox_id)
        await self._api.delete(self.sandbox_id)
