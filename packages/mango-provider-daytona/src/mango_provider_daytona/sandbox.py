"""The client for one Daytona sandbox: exec and files through its toolbox."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from mango.provider import (
    Command,
    EntryKind,
    ExecResult,
    ExposedPort,
    Location,
    MangoError,
    PathExists,
    PathPolicy,
    PermanentError,
    ProtocolError,
    ResolvedPath,
    ResourceConflict,
    SandboxRef,
    SandboxSpec,
    StatCallback,
    check_port,
    file_not_found,
)
from mango.provider.files import Download
from mango.provider.filesystem import NativeEntry, RemoteFileSystem
from mango.provider.http import RemoteUnavailable
from mango.provider.output import ExecChannel
from mango.provider.remote import RemoteSandbox
from mango.provider.shellprocesses import ShellProcesses
from mango_provider_daytona.api import Toolbox
from mango_provider_daytona.execution import TEARDOWN_SETTLE_SECONDS, run_command
from mango_provider_daytona.files import classified, file_part
from mango_provider_daytona.layout import PREVIEW_TOKEN_HEADER
from mango_provider_daytona.remote import DaytonaRemote
from mango_provider_daytona.scripts import (
    classify_line,
    parse_classification,
    parse_stats,
    replace_line,
    stat_line,
    unlink_line,
)

__all__ = ["PROCESS_ROOT", "SESSION_PREFIX", "DaytonaSandbox"]

PROCESS_ROOT = "/tmp/.mango-processes"  # noqa: S108 - the sandbox's own /tmp
"""The background-process table: the sandbox user (not root) may write there, as the exec
wrapper's control files do."""
SESSION_PREFIX = "mango-"
"""A background process runs in the session ``mango-<process id>``."""

STAT_BATCH = 200
"""Paths per stat line at most."""
STAT_BATCH_BYTES = 64 * 1024
"""Bytes of paths per stat line at most: the daemon may run the line as one ``sh -c``
argument, which Linux caps at 128 KiB."""


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class DaytonaSandbox(RemoteSandbox, RemoteFileSystem, ShellProcesses):
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

    async def expose_port(self, port: int) -> ExposedPort:
        """Daytona's preview link for ``port``, with its token in ``X-Daytona-Preview-Token``.

        ``GET /sandbox/{id}/ports/{port}/preview-url`` answers the URL (Daytona's
        proxy, ``https://{port}-{id}.<proxy domain>``) and the sandbox's preview
        token; mango's sandboxes are private, so a request to the URL needs the
        token (else 401). The URL itself carries none, so it may be logged;
        the token is only in :attr:`ExposedPort.headers`. A sandbox that is
        gone is :class:`SandboxNotFound`.
        """
        check_port(port)
        url, token = await self._provider.api.preview_url(self.sandbox_id, port)
        try:
            return ExposedPort(url, {PREVIEW_TOKEN_HEADER: token} if token else {})
        except ValueError as exc:
            raise ProtocolError(
                f"get preview url: Daytona's preview link for port {port} is not a plain "
                "http(s) URL"
            ) from exc

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

    async def _upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        await self._toolbox.upload_stream(path, chunks)

    async def _replace(self, source: str, destination: str) -> None:
        # The daemon's move refuses an existing destination: one rename in the shell.
        code, text = await self._toolbox.execute(replace_line(source, destination), timeout=60)
        if code != 0:
            raise PermanentError(f"replacing {destination!r} failed in the sandbox: {text[:200]}")

    async def _discard(self, path: str) -> None:
        await self._toolbox.delete(path, recursive=False)

    # ------------------------------------------------------------------ the file API (the kit's)

    sorted_listing = True  # filepath.Walk: the first level arrives in name order
    listing_descends = True  # /files/search walks the whole tree

    async def _stats(self, paths: list[str]) -> list[NativeEntry | None]:
        # The toolbox's /files/info and /files list follow links (os.Stat) and skip
        # dangling ones: the lstat comes from one shell line per batch of paths.
        found: list[NativeEntry | None] = []
        batch: list[str] = []
        size = 0
        for index, path in enumerate(paths):
            batch.append(path)
            size += len(path.encode()) + 3
            last = index == len(paths) - 1
            if last or len(batch) == STAT_BATCH or size + 4096 * 2 > STAT_BATCH_BYTES:
                _code, text = await self._toolbox.execute(stat_line(batch), timeout=60)
                found.extend(parse_stats(text, batch))
                batch, size = [], 0
        return found

    async def _entry_info(self, path: str) -> NativeEntry | None:
        return (await self._stats([path]))[0]

    async def _describe(self, entries: list[NativeEntry]) -> list[NativeEntry | None]:
        return await self._stats([entry.path for entry in entries])

    @asynccontextmanager
    async def _listing(
        self, path: str, *, recursive: bool
    ) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        del recursive  # /files/search always walks the tree; the kit keeps the first level

        async with self._toolbox.search(path) as paths:

            async def entries() -> AsyncIterator[NativeEntry]:
                async for found in paths:
                    if found != path:  # the walk starts with the directory itself
                        # Only a name so far: _describe stats the entries kept.
                        yield NativeEntry(found, EntryKind.OTHER)

            yield entries()

    async def _missing(self, path: str, what: str) -> FileNotFoundError:
        """A toolbox 404 is "no such file" only while the sandbox is there."""
        answer = RemoteUnavailable(f"{what}: HTTP 404 for {path!r}", status=404)
        meaning = await self._lost(answer)
        if meaning is not answer:
            raise meaning
        return file_not_found(path)

    async def _move(self, source: str, destination: str) -> None:
        try:
            moved = await self._toolbox.move(source, destination)
        except ResourceConflict as exc:
            # Created since the kit's check: the daemon's own 409.
            raise PathExists(f"cannot rename to {destination!r}: it exists") from exc
        if not moved:
            raise await self._missing(source, "move file")

    async def _delete(self, entry: NativeEntry, *, recursive: bool) -> None:
        del recursive  # the kit checked a directory's emptiness
        # The daemon refuses a directory without recursive, and RemoveAll takes a link itself.
        ok = await self._toolbox.delete(entry.path, recursive=entry.kind is not EntryKind.REGULAR)
        if not ok and entry.kind is EntryKind.SYMLINK:
            # Its os.Stat cannot see a dangling link: the shell unlinks it.
            await self._toolbox.execute(unlink_line(entry.path), timeout=60)
        elif not ok:
            raise await self._missing(entry.path, "delete file")

    async def _create_dir(self, path: str) -> None:
        await self._toolbox.make_dir(path)
