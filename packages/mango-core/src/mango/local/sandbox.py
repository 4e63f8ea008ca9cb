"""The client for one local sandbox: a workspace directory on the worker host."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from mango.local.execution import SAFE_PATH, run_command
from mango.local.fileapi import (
    list_workspace_dir,
    make_workspace_dir,
    remove_workspace_path,
    rename_workspace_path,
    stat_workspace_path,
)
from mango.local.files import (
    READ_CHUNK_BYTES,
    StagedFile,
    open_workspace_dir,
    open_workspace_file,
    open_workspace_root,
    read_chunk,
    read_workspace_file,
    stage_workspace_file,
    write_workspace_file,
)
from mango.local.layout import remove_session, workspace_root
from mango.local.processes import (
    kill_process,
    list_processes,
    process_dir,
    process_info,
    read_log,
    remove_processes,
    start_process,
    stdin_fd,
)
from mango.local.runs import log_run, run_log
from mango.provider import (
    DEFAULT_LIST_LIMIT,
    Command,
    DirectoryListing,
    ExecResult,
    FileInfo,
    InvalidInput,
    PathPolicy,
    PermanentError,
    ProcessHandle,
    ProcessInfo,
    ProcessNotFound,
    ProcessOutput,
    ProcessState,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    check_list_limit,
)
from mango.provider.execution import ExecHandle, ExecTracker, StreamedExec, checkpoint
from mango.provider.files import checked_chunks
from mango.provider.output import ExecChannel
from mango.provider.reads import ThreadedChunks, read_limit

__all__ = ["DESTROY_WAIT_SECONDS", "WAIT_POLL_SECONDS", "LocalSandbox", "checkpoint"]

DESTROY_WAIT_SECONDS = 10.0
"""How long destroy waits for killed commands to be reaped before removing the tree."""
WAIT_POLL_SECONDS = 0.02
"""How often a wait for a background process looks at its record (another process writes it)."""


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.frozen)
class LocalSandbox(StreamedExec):
    """One local sandbox, obtained from :class:`~mango.local.LocalProvider`.

    ``exec`` and ``exec_stream`` run a command as a host process group in the
    workspace. The environment is exactly ``PATH``, ``HOME`` (the workspace
    root) and ``command.env``; stdin is ``command.stdin`` or ``/dev/null``.
    See :mod:`mango.local.execution` for timeout, cancellation and output
    caps. :class:`PathEscapeError` if ``command.cwd`` goes through a symlink,
    :class:`SandboxNotFound` if the sandbox is gone.

    Commands run as host processes of the worker's user, in the workspace
    directory: this is **not an isolation boundary** (see :mod:`mango.local`).
    The sandbox keeps the spec it was created or attached with; its
    ``timeout`` is the default for commands that give none.
    """

    _ref: SandboxRef
    _session_dir: Path
    _spec: SandboxSpec
    _max_output_bytes: int
    _max_read_bytes: int
    _max_process_log_bytes: int
    _tracker: ExecTracker = attrs.field(repr=False)
    # Plain strings: the exec path checks them on every command (Path objects cost more).
    _session_path: str = attrs.field(
        init=False,
        repr=False,
        default=attrs.Factory(lambda self: str(self._session_dir), takes_self=True),
    )
    _run_log: str = attrs.field(
        init=False,
        repr=False,
        default=attrs.Factory(
            lambda self: str(run_log(self._session_dir.parent, self._session_dir.name)),
            takes_self=True,
        ),
    )

    @property
    def ref(self) -> SandboxRef:
        """``SandboxRef("local", <canonical session directory>)``."""
        return self._ref

    @property
    def root(self) -> str:
        """The host path of the workspace root (commands' cwd and ``HOME``)."""
        return str(workspace_root(self._session_dir))

    @property
    def path_policy(self) -> PathPolicy:
        """The file-tool path policy: workspace-relative paths under :attr:`root` only."""
        return PathPolicy(self.root)

    @property
    def spec(self) -> SandboxSpec:
        """The spec this client was created or attached with."""
        return self._spec

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        with self._tracker.track(str(self._session_dir)) as handle:
            # The command enters the directory the walk opened, by descriptor: a
            # component swapped for a symlink after the check cannot redirect it.
            # The root is one open(O_NOFOLLOW), cheap enough to skip the thread hop.
            cwd_fd = (
                await asyncio.to_thread(open_workspace_dir, self.path_policy, command.cwd)
                if command.cwd
                else open_workspace_root(self.root)
            )
            try:
                if handle.destroyed:
                    return channel.result(exit_code=-1, cancelled=True)
                env = {"PATH": SAFE_PATH, "HOME": self.root, **command.env_dict}
                result = await run_command(
                    argv=command.argv,
                    stdin=command.stdin,
                    env=env,
                    cwd_fd=cwd_fd,
                    timeout=timeout,
                    channel=channel,
                    handle=handle,
                    on_start=lambda pgid: self._started(pgid, handle),
                )
            except OSError as exc:
                if not await asyncio.to_thread(workspace_root(self._session_dir).is_dir):
                    raise SandboxNotFound(f"local sandbox {self._session_dir} is gone") from exc
                raise ProviderUnavailable(f"cannot start the command: {exc}") from exc
            finally:
                os.close(cwd_fd)
            if result.exit_code != 0 and not result.cancelled and self._deleted():
                # Killed by a destroy in another process (mango sessions delete):
                # say so, as a destroy in this process does.
                return attrs.evolve(result, exit_code=-1, timed_out=False, cancelled=True)
            return result

    def _deleted(self) -> bool:
        """True once a destroy (from any process) has renamed the session directory away."""
        try:
            return not stat.S_ISDIR(os.lstat(self._session_path).st_mode)
        except OSError:
            return True

    def _started(self, pgid: int, handle: ExecHandle) -> None:
        """Log the new process group (see :mod:`mango.local.runs`), then check for a destroy.

        Log first, check second: a destroy renames the directory first and
        reads the log second, so whichever comes last sees the other.
        """
        if not log_run(self._run_log, pgid) and not self._deleted():
            log_run(self._run_log, pgid, create=True)  # a sandbox from before run logs
        if self._deleted():
            handle.destroy()

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of the regular file ``path`` under :attr:`path_policy`.

        At most ``max_bytes`` (default: the provider's read cap): the size is
        checked before reading and the read stops past the bound, with
        :class:`FileTooLarge`. Raises what :mod:`mango.local.files` documents,
        and :class:`SandboxNotFound` if the workspace is gone.
        """
        limit = read_limit(max_bytes, self._max_read_bytes)
        self.path_policy.locate(path)
        await checkpoint()
        return await asyncio.to_thread(read_workspace_file, self.path_policy, path, limit)

    @asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream the regular file ``path`` in chunks of at most 1 MiB, whatever its size.

        The path is checked and the file opened on entry (the errors of
        :meth:`read_file`, except :class:`FileTooLarge`); leaving the block
        closes it.
        """
        self.path_policy.locate(path)
        await checkpoint()
        opening = asyncio.get_running_loop().run_in_executor(
            None, open_workspace_file, self.path_policy, path
        )
        try:
            fd = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The open still runs in its thread: whatever it opens is closed.
            opening.add_done_callback(_close_opened)
            raise
        chunks = ThreadedChunks(lambda: read_chunk(fd, READ_CHUNK_BYTES, path))
        try:
            yield chunks
        finally:
            await chunks.aclose()
            os.close(fd)

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path`` with ``data``, creating parent directories.

        Never follows a symlink (:class:`PathEscapeError`); a directory or other
        non-regular target raises :class:`PermanentError`.
        """
        self.path_policy.locate(path, write=True)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"write_file() takes bytes, got {type(data).__name__}")
        payload = bytes(data)
        await checkpoint()
        await asyncio.to_thread(write_workspace_file, self.path_policy, path, payload)

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Create or replace ``path`` with what ``chunks`` yields, atomically (memory O(chunk)).

        The checks of :meth:`write_file` on entry; the chunks go to a
        temporary sibling (:func:`~mango.local.files.stage_workspace_file`)
        that is renamed over ``path`` after the last one. A failure midway,
        cancellation included, removes the temporary and leaves the old file.
        """
        self.path_policy.locate(path, write=True)
        await checkpoint()
        opening = asyncio.get_running_loop().run_in_executor(
            None, stage_workspace_file, self.path_policy, path
        )
        try:
            staged = await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(_abort_staged)
            raise
        try:
            async for chunk in checked_chunks(chunks):
                await asyncio.to_thread(staged.write, chunk)
            await asyncio.to_thread(staged.commit)
        except BaseException:
            # Synchronous: the lock waits at most for one chunk still being written.
            staged.abort()
            raise

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        """The first ``limit`` entries below the directory ``path``, sorted by path.

        Read lazily (:mod:`mango.local.fileapi`): memory is O(limit) whatever
        the directory holds. Links are listed, never descended into.
        """
        check_list_limit(limit)
        self.path_policy.locate(path, directory=True)
        await checkpoint()
        return await asyncio.to_thread(
            list_workspace_dir, self.path_policy, path, recursive=recursive, limit=limit
        )

    async def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names, without following a last-component link."""
        self.path_policy.locate(path, directory=True)
        await checkpoint()
        return await asyncio.to_thread(stat_workspace_path, self.path_policy, path)

    async def exists(self, path: str) -> bool:
        """True if ``path`` names an entry (a dangling link too); escapes still raise."""
        try:
            await self.stat(path)
        except FileNotFoundError:
            return False
        return True

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a link (not its target) or a directory (its tree with ``recursive``)."""
        self.path_policy.locate(path, write=True, directory=True)
        await checkpoint()
        await asyncio.to_thread(remove_workspace_path, self.path_policy, path, recursive=recursive)

    async def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination`` atomically, never replacing an existing entry."""
        self.path_policy.locate(source, write=True, directory=True)
        self.path_policy.locate(destination, write=True, directory=True)
        await checkpoint()
        await asyncio.to_thread(rename_workspace_path, self.path_policy, source, destination)

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Create the directory ``path`` (``mkdir -p`` with ``parents``), never through a link."""
        self.path_policy.locate(path, write=True, directory=True)
        await checkpoint()
        await asyncio.to_thread(make_workspace_dir, self.path_policy, path, parents=parents)

    # Background processes (capability background-processes, see mango.local.processes).

    def _process_dir(self, process_id: str) -> Path:
        """The record of ``process_id``; SandboxNotFound once the sandbox is gone."""
        if self._deleted():
            raise SandboxNotFound(f"local sandbox {self._session_dir} is gone")
        try:
            return process_dir(self._session_dir.parent, self._session_dir.name, process_id)
        except ProcessNotFound:
            if self._deleted():
                raise SandboxNotFound(f"local sandbox {self._session_dir} is gone") from None
            raise

    async def start(self, command: Command) -> ProcessHandle:
        """Start ``command`` under a supervisor of its own; see :class:`ProcessSandbox`.

        The environment and directory are those of :meth:`exec`; the process
        outlives this client and the worker (its supervisor records its end).
        """
        await checkpoint()
        if self._deleted():
            raise SandboxNotFound(f"local sandbox {self._session_dir} is gone")
        cwd_fd = (
            await asyncio.to_thread(open_workspace_dir, self.path_policy, command.cwd)
            if command.cwd
            else open_workspace_root(self.root)
        )
        try:
            env = {"PATH": SAFE_PATH, "HOME": self.root, **command.env_dict}
            process_id, pid = await asyncio.to_thread(
                start_process,
                self._session_dir.parent,
                self._session_dir.name,
                argv=command.argv,
                env=env,
                cwd_fd=cwd_fd,
                stdin=command.stdin,
                timeout=command.timeout,
                log_cap=self._max_process_log_bytes,
            )
        except OSError as exc:
            if self._deleted():
                raise SandboxNotFound(f"local sandbox {self._session_dir} is gone") from exc
            raise ProviderUnavailable(f"cannot start the background process: {exc}") from exc
        finally:
            os.close(cwd_fd)
        if self._deleted():
            # A destroy ran meanwhile: its supervisor killed the process; leave no record.
            await asyncio.to_thread(
                remove_processes, self._session_dir.parent, self._session_dir.name
            )
            raise SandboxNotFound(f"local sandbox {self._session_dir} is gone")
        return ProcessHandle(process_id, pid)

    async def processes(self) -> list[ProcessInfo]:
        """Every background process of this sandbox, oldest first, from any worker."""
        await checkpoint()
        if self._deleted():
            raise SandboxNotFound(f"local sandbox {self._session_dir} is gone")
        return await asyncio.to_thread(
            list_processes, self._session_dir.parent, self._session_dir.name
        )

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        """The log from byte ``since`` (at most ``max_bytes``, default the output cap)."""
        limit = self._max_output_bytes if max_bytes is None else max_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        directory = self._process_dir(process_id)
        return await asyncio.to_thread(read_log, directory, since, limit)

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        """Poll the record until the process ends or ``timeout`` passes (then RUNNING)."""
        directory = self._process_dir(process_id)
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                info = await asyncio.to_thread(process_info, directory)
            except ProcessNotFound:
                self._process_dir(process_id)  # SandboxNotFound after a destroy
                raise
            if info.state is not ProcessState.RUNNING:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                return info
            pause = WAIT_POLL_SECONDS
            if deadline is not None:
                pause = min(pause, max(deadline - time.monotonic(), 0.0))
            await asyncio.sleep(pause)

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """Write ``data`` to the process's stdin FIFO (waits while it is full)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(f"send_stdin() takes bytes, got {type(data).__name__}")
        directory = self._process_dir(process_id)
        fd = await asyncio.to_thread(stdin_fd, directory)
        view = memoryview(bytes(data))
        try:
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await asyncio.sleep(WAIT_POLL_SECONDS)
                    if (await asyncio.to_thread(process_info, directory)).state is not (
                        ProcessState.RUNNING
                    ):
                        raise PermanentError(
                            f"background process {process_id} ended before reading its stdin"
                        ) from None
        finally:
            os.close(fd)

    async def kill(self, process_id: str) -> ProcessInfo:
        """SIGKILL the process's group (its whole tree); idempotent for an ended process."""
        directory = self._process_dir(process_id)
        return await asyncio.to_thread(kill_process, directory)

    async def destroy(self) -> None:
        """Kill this sandbox's running commands and remove its directory. Idempotent.

        Commands and background processes still running, started by this
        process or any other, are killed; commands get
        ``ExecResult(cancelled=True, exit_code=-1)``. After this, attach
        raises :class:`SandboxNotFound`.
        """
        await checkpoint()
        await self._tracker.terminate(str(self._session_dir), DESTROY_WAIT_SECONDS)
        await asyncio.to_thread(remove_session, self._session_dir)


def _abort_staged(opening: asyncio.Future[StagedFile]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().abort()


def _close_opened(opening: asyncio.Future[int]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        os.close(opening.result())
