"""One E2B (or Cube) sandbox as mango sees it: exec through envd, files, keep-alive, destroy.

Commands are envd's process stream (:mod:`mango_provider_e2b.execution`).
Files are envd's ``Stat``, ``MakeDir`` and ``/files`` under the kit's path
policy, read and written by the kit's :class:`~mango.provider.files.RemoteFiles`;
the file API (``file-api``) is envd's ``ListDir``, ``Stat``, ``Move``,
``Remove`` and ``MakeDir`` under the kit's
:class:`~mango.provider.filesystem.RemoteFileSystem`. envd's ``Move``
overwrites and its ``Remove`` is always recursive: the kit checks the
destination and a directory's emptiness first (the window it leaves is in
that module's docstring).
Background processes (``background-processes``) are envd's process service
under the kit's supervisor (:mod:`mango_provider_e2b.processes`).

The data plane's answer for a sandbox it cannot reach is a 502 from the
proxy; only the control plane can say whether that sandbox is gone
(:class:`SandboxNotFound`), paused (resumed once, and the call that never
reached envd is repeated, unless it was paused on purpose through this
provider instance: :class:`SandboxNotRunning`) or there (the error stands,
retryable): the
provider view's :meth:`~mango.provider.remote.ProviderView.lost`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import attrs
import httpx

from mango.provider import (
    Command,
    ConfigurationError,
    Entry,
    ExecResult,
    ExposedPort,
    InvalidInput,
    MangoError,
    PathPolicy,
    PermanentError,
    ResolvedPath,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxRef,
    SandboxSpec,
    check_port,
    file_not_found,
)
from mango.provider.files import Download
from mango.provider.filesystem import NativeEntry, RemoteFileSystem
from mango.provider.http import RemoteUnavailable
from mango.provider.output import ExecChannel
from mango.provider.remote import Presence, RemoteSandbox
from mango.provider.steps import StepKey, StepRecords, exec_once
from mango_provider_e2b.control import SandboxInfo, SandboxState
from mango_provider_e2b.envd import ENVD_PORT, LIST_DEPTH_ALL, LSTAT_SINCE, Envd, at_least
from mango_provider_e2b.execution import KILL_SECONDS, ROOT, run_command, unreachable
from mango_provider_e2b.processes import ProcessMethods
from mango_provider_e2b.remote import Remote

__all__ = ["ROOT", "STEPS_ROOT", "E2BSandbox", "Remote"]

STEPS_ROOT = "/var/lib/mango/steps"
"""Where a sandbox keeps its step records (:mod:`mango.provider.steps`), beside the
background processes' table."""

T = TypeVar("T")

KEEP_MARGIN_SECONDS = 30.0
"""A sandbox must outlive the current operation by at least this much."""


@attrs.define(eq=False)
class E2BSandbox(RemoteSandbox, RemoteFileSystem, ProcessMethods):
    """A client for one E2B or Cube sandbox (see the module docstring)."""

    _provider: Remote = attrs.field(repr=False)
    _info: SandboxInfo
    _spec: SandboxSpec
    _alive_until: float = attrs.field(default=0.0, repr=False)
    _ref: SandboxRef = attrs.field(init=False)
    _envd: Envd = attrs.field(init=False, repr=False)
    _path_policy: PathPolicy = attrs.field(init=False, repr=False)
    destroy_wait = KILL_SECONDS

    def __attrs_post_init__(self) -> None:
        self._ref = SandboxRef(self._provider.name, self._info.sandbox_id)
        self._envd = self._provider.envd(self._info)
        self._path_policy = PathPolicy(ROOT)

    def _refresh(self, info: SandboxInfo) -> None:
        # A connect answer carries the current envd token and domain.
        if info.envd_access_token is None:
            info = attrs.evolve(info, envd_access_token=self._info.envd_access_token)
        self._info = info
        self._envd = self._provider.envd(info)

    # ------------------------------------------------------------ steps

    @property
    def step_records(self) -> StepRecords:
        """``/var/lib/mango/steps`` in the sandbox (:mod:`mango.provider.steps`)."""
        return StepRecords(STEPS_ROOT, self._output_cap())

    async def exec_step(
        self, key: StepKey, command: Command, *, timeout: float | None
    ) -> ExecResult:
        """Run ``command`` once for ``key`` (:class:`~mango.domain.ports.StepSandbox`): envd
        runs a command on when its stream's client (a dead worker) is gone, so a retry
        finds it and collects its result."""
        return await exec_once(self, self.step_records, key, command, timeout=timeout)

    # ------------------------------------------------------------ keep-alive

    async def keep_alive(self) -> None:
        """Resume the sandbox if it is paused and give it the idle timeout again.

        Raises :class:`SandboxNotFound` if it is gone.
        """
        started = time.monotonic()
        idle = self._provider.idle_timeout
        self._refresh(await self._provider.resume(self.sandbox_id, timeout=idle))
        self._alive_until = started + idle

    # ------------------------------------------------------------ pause (capability ``pause``)

    async def pause(self) -> None:
        """``POST /sandboxes/{id}/pause``: memory and filesystem kept; idempotent.

        The sandbox's VM stops: every process in it is frozen, and a
        command's stream is cut (E2B's edge drops it); the command waits and
        takes its stream up with envd's ``Connect`` once the sandbox is
        resumed (output written between the resume and the take-up is
        lost: envd replays nothing). Until a resume, a data call through
        this provider instance is :class:`SandboxNotRunning` instead of
        resuming the sandbox. :class:`SandboxNotFound` if it is gone.
        """
        await self._provider.pause(self.sandbox_id)

    async def resume(self) -> None:
        """``connect`` (a paused sandbox resumes, with the idle timeout); idempotent.

        Returns once the commands the pause cut have their streams again
        (bounded by :data:`~mango_provider_e2b.remote.TAKE_UP_SECONDS`).
        """
        await self.keep_alive()

    async def is_paused(self) -> bool:
        """The control plane's word: is the sandbox paused now?"""
        return (await self._provider.control.get(self.sandbox_id)).state == SandboxState.PAUSED

    async def _keep_for(self, seconds: float | None) -> None:
        """Make sure the sandbox is not paused within ``seconds`` (plus a margin) from now.

        A service without lifetimes (Cube) needs nothing. E2B's ``/timeout``
        answers 404 for a paused sandbox as well as for a gone one: that
        answer is confirmed by a ``GET`` (the kit's ``confirm_missing``)
        before it means anything, and a paused sandbox is resumed with the
        lifetime asked for.
        """
        if not self._provider.lifetime:
            return
        idle = self._provider.idle_timeout
        needed = (seconds if seconds is not None else idle) + KEEP_MARGIN_SECONDS
        if time.monotonic() + needed <= self._alive_until:
            return
        lifetime = max(idle, needed)
        started = time.monotonic()
        control = self._provider.control
        if not await control.set_timeout(self.sandbox_id, lifetime):
            answer = RemoteUnavailable(
                f"{self._provider.name}: extend sandbox timeout: HTTP 404 for sandbox "
                f"{self.sandbox_id!r}, which E2B also answers for a paused sandbox",
                status=404,
            )
            meaning = await self._provider.confirm_missing(self.sandbox_id, answer)
            if not isinstance(meaning, SandboxNotRunning) or self.sandbox_id in self._provider.held:
                raise meaning from None
            self._refresh(await control.connect(self.sandbox_id, timeout=lifetime))
        self._alive_until = started + lifetime

    # ------------------------------------------------------------ ports

    async def expose_port(self, port: int) -> ExposedPort:
        """Where ``port`` in the sandbox answers through E2B's client-proxy.

        The shared sandbox URL (``E2B_SANDBOX_URL``) with the routing headers
        ``E2b-Sandbox-Id`` and ``E2b-Sandbox-Port``, or the host URL
        ``https://<port>-<id>.<domain>`` that E2B documents (the address the
        SDK's ``get_host`` computes); the traffic access token, if the
        service issued one, as a header. The URL is computed, so the sandbox
        is asked for first: gone is :class:`SandboxNotFound`. envd's port is
        mango's control plane (:class:`InvalidInput`); Cube offers no such
        address (:class:`PermanentError`; the capability is not declared).
        """
        check_port(port)
        if self._provider.port_address is None:
            raise PermanentError(
                f"{self._provider.name} does not declare exposed-ports: its proxy gives no "
                "address another client can use"
            )
        if port == ENVD_PORT:
            raise InvalidInput(
                f"port {port} is envd's, which mango does not expose", hint="serve on another port"
            )
        if await self._provider.presence(self.sandbox_id) is Presence.GONE:
            raise SandboxNotFound(f"{self._provider.name} sandbox {self.sandbox_id!r} is gone")
        return self._provider.port_address(self._info, port)

    # ------------------------------------------------------------ data-plane errors

    async def _confirm(self, error: MangoError, *, resume: bool) -> None:
        """After a data-plane failure: a paused sandbox is resumed (if asked) and we return.

        Otherwise raises what the failure means (the kit's rule): gone →
        :class:`SandboxNotFound`, paused → :class:`SandboxNotRunning` (also
        when asked to resume a sandbox paused through this provider instance:
        only a resume undoes an explicit pause), there → ``error`` itself.
        """
        meaning = await self._provider.lost(self.sandbox_id, error)
        held = self.sandbox_id in self._provider.held  # paused on purpose: no call undoes it
        if resume and not held and isinstance(meaning, SandboxNotRunning):
            try:
                await self.keep_alive()
            except RemoteUnavailable as exc:
                # The final error names the failure that started it, then the resume's.
                raise type(exc)(
                    f"{error}; resuming the paused sandbox failed too: {exc}",
                    status=exc.status,
                    retry_after=exc.retry_after,
                ) from exc
            return
        if meaning is error:
            raise error
        raise meaning from error

    async def _data_call(self, call: Callable[[], Awaitable[T]]) -> T:
        resumes = self._provider.resumes.get(self.sandbox_id, 0)
        try:
            return await call()
        except RemoteUnavailable as exc:
            if not unreachable(exc):
                raise
            async with self._provider.confirming(self.sandbox_id):
                if self._provider.resumes.get(self.sandbox_id, 0) == resumes:
                    await self._confirm(exc, resume=True)
                # else a concurrent call resumed the sandbox meanwhile: this one never
                # reached envd (the proxy's 502), so it is repeated.
        return await call()

    # ------------------------------------------------------------ exec

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._provider.tracker.track(self.sandbox_id) as handle:
            await self._keep_for(timeout)
            if command.cwd:
                # envd refuses a cwd that does not exist: made as local and Docker make it.
                await self._ensure_directory(command.cwd)
            return await run_command(self, command, channel, timeout, handle)

    # ------------------------------------------------------------ files (the kit's RemoteFiles)

    async def _stat(self, path: str) -> Entry | None:
        return await self._data_call(lambda: self._envd.stat(path))

    @contextlib.asynccontextmanager
    async def _download(self, resolved: ResolvedPath, path: str) -> AsyncIterator[Download]:
        async def opened() -> tuple[AbstractAsyncContextManager[httpx.Response], httpx.Response]:
            manager = self._envd.download(resolved.path)
            return manager, await manager.__aenter__()

        manager, response = await self._data_call(opened)
        try:
            if response.status_code == 404:
                raise file_not_found(path)
            yield Download(response.aiter_bytes())
        finally:
            await manager.__aexit__(None, None, None)

    async def _make_dirs(self, paths: tuple[str, ...]) -> None:
        # MakeDir creates every missing parent of the deepest one.
        await self._make_dir(paths[-1])

    async def _upload(self, path: str, data: bytes) -> None:
        await self._data_call(lambda: self._envd.upload(path, data))

    async def _upload_stream(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        # Not through _data_call: a stream cannot be sent twice. A paused sandbox
        # was resumed by the stat that checked the path a moment ago; a failure
        # still says what it means (gone, paused), never resumed and resent.
        try:
            await self._envd.upload_stream(path, chunks)
        except RemoteUnavailable as exc:
            if not unreachable(exc):
                raise
            await self._confirm(exc, resume=False)
            raise

    async def _replace(self, source: str, destination: str) -> None:
        # envd's Move is os.Rename: it replaces the destination in one step.
        await self._data_call(lambda: self._envd.move(source, destination))

    async def _discard(self, path: str) -> None:
        await self._data_call(lambda: self._envd.remove(path))

    async def _make_dir(self, path: str) -> None:
        """Create the absolute directory ``path`` and its parents (an existing one is fine)."""
        await self._data_call(lambda: self._envd.make_dir(path))

    # ------------------------------------------------------------ the file API (RemoteFileSystem)

    sorted_listing = True  # envd walks with filepath.WalkDir: each directory in name order

    async def _check_file_api(self) -> None:
        version = self._envd.version
        if version is not None and not at_least(version, LSTAT_SINCE):
            reason = (
                f"this sandbox's envd ({version}) follows links in Stat, so it cannot "
                "tell a link from its target; the file API needs envd 0.2.6 or later"
            )
            raise ConfigurationError(
                f"{self._provider.name}: {reason}",
                hint="rebuild the sandbox's template with a current envd",
            )

    async def _entry_info(self, path: str) -> NativeEntry | None:
        return await self._data_call(lambda: self._envd.info(path))

    @contextlib.asynccontextmanager
    async def _listing(
        self, path: str, *, recursive: bool
    ) -> AsyncIterator[AsyncIterator[NativeEntry]]:
        depth = LIST_DEPTH_ALL if recursive else 1

        async def opened() -> tuple[
            AbstractAsyncContextManager[AsyncIterator[NativeEntry]], AsyncIterator[NativeEntry]
        ]:
            manager = self._envd.list_dir(path, depth=depth)
            return manager, await manager.__aenter__()

        manager, entries = await self._data_call(opened)
        try:
            yield entries
        finally:
            await manager.__aexit__(None, None, None)

    async def _move(self, source: str, destination: str) -> None:
        await self._data_call(lambda: self._envd.move(source, destination))

    async def _delete(self, entry: NativeEntry, *, recursive: bool) -> None:
        del recursive  # envd's Remove is RemoveAll; the kit checked a directory's emptiness
        await self._data_call(lambda: self._envd.remove(entry.path))

    async def _create_dir(self, path: str) -> None:
        await self._make_dir(path)
