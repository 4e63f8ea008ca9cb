"""TinyboxSandbox: commands as host process groups, files under the box's workspace.

A box is one directory under the provider's base directory::

    <box>/owner          the ownership labels (JSON), written once by create
    <box>/workspace/     the workspace: cwd and HOME of every command
    <box>/runs/<pgid>    one record per running command (the start time of its leader)

**Not an isolation boundary**: commands run as the worker's user on its host.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from mango.provider import (
    Command,
    Entry,
    ExecResult,
    OutputStream,
    PathEscapeError,
    PathPolicy,
    ResolvedPath,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    check_regular,
)
from mango.provider.execution import StreamedExec, torn_down
from mango.provider.files import checked_chunks, staging_name
from mango.provider.hostdirs import leftovers, purge_leftovers, retire_dir
from mango.provider.output import ExecChannel
from mango.provider.reads import (
    READ_CHUNK_BYTES,
    ThreadedChunks,
    check_size,
    collect_bounded,
    read_limit,
)

OWNER = "owner"
WORKSPACE = "workspace"
RUNS = "runs"
_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_SECONDS = 1.0
"""After a kill, how long the output pipes may stay open before they are abandoned."""


class TinyboxSandbox(StreamedExec):
    """One box. ``exec`` and ``exec_stream`` come from the kit's ``StreamedExec``."""

    def __init__(
        self, ref: SandboxRef, box: Path, spec: SandboxSpec, *, output_cap: int, read_cap: int
    ) -> None:
        self._ref = ref
        self._box = box
        self._spec = spec  # StreamedExec reads _spec (the timeout) and _max_output_bytes
        self._max_output_bytes = output_cap
        self._read_cap = read_cap
        self._policy = PathPolicy(str(box / WORKSPACE))  # the shared path rules

    @property
    def ref(self) -> SandboxRef:
        """``tinybox:<box name>``."""
        return self._ref

    @property
    def root(self) -> str:
        """The host path of the workspace."""
        return str(self._box / WORKSPACE)

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        """Run ``command`` in its own process group, feeding its output to ``channel``."""
        cwd = await self._policy.resolve_directory(command.cwd or ".", self._stat, create=True)
        await asyncio.to_thread(_make_dirs, cwd)
        try:
            process = await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=asyncio.subprocess.PIPE if command.stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd.path,
                env={"PATH": _PATH, "HOME": self.root, **command.env_dict},
                start_new_session=True,  # its own process group: one killpg reaches every child
            )
        except FileNotFoundError:
            # Every provider's words: the conformance suite checks them.
            program = command.argv[0]
            reason = "No such file or directory" if "/" in program else "command not found"
            channel.feed(OutputStream.STDERR, f"mango: {program}: {reason}\n".encode())
            return channel.result(exit_code=127)
        except PermissionError:
            channel.feed(
                OutputStream.STDERR, f"mango: {command.argv[0]}: Permission denied\n".encode()
            )
            return channel.result(exit_code=126)
        if process.stdout is None or process.stderr is None:  # pragma: no cover - PIPE was asked
            raise RuntimeError("the command's output pipes are missing")
        record = self._box / RUNS / str(process.pid)
        try:  # first, so that a destroy from any process finds the command
            await asyncio.to_thread(record.write_text, _started_at(process.pid))
        except FileNotFoundError:  # the box was destroyed meanwhile: the command must not run
            _kill_group(process.pid)
            await process.wait()
            return channel.result(exit_code=-1, cancelled=True)
        helpers = [
            asyncio.ensure_future(_pump(process.stdout, channel, OutputStream.STDOUT)),
            asyncio.ensure_future(_pump(process.stderr, channel, OutputStream.STDERR)),
        ]
        if command.stdin and process.stdin is not None:
            helpers.append(asyncio.ensure_future(_feed(process.stdin, command.stdin)))
        timed_out = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(process.wait(), *helpers)  # readers, stdin feeder
            except TimeoutError:
                timed_out = True
                _kill_group(process.pid)
                await process.wait()
                await asyncio.wait(helpers, timeout=_DRAIN_SECONDS)
        except BaseException:
            # Cancellation (or the stream's consumer left): the whole group dies first.
            _kill_group(process.pid)
            raise
        finally:
            for helper in helpers:
                helper.cancel()
            record.unlink(missing_ok=True)
        code = await process.wait()
        if code == -signal.SIGKILL and not timed_out and await torn_down(self._gone):
            return channel.result(exit_code=-1, cancelled=True)  # a destroy, here or elsewhere
        return channel.result(
            exit_code=-1 if timed_out else (128 - code if code < 0 else code), timed_out=timed_out
        )

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular file of at most ``max_bytes`` (default: the read cap)."""
        limit = read_limit(max_bytes, self._read_cap)
        async with self._chunks(path, limit) as chunks:
            return await collect_bounded(chunks, limit, path=path)  # FileTooLarge past it

    def open_file(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream a regular file in chunks, whatever its size; the path is checked on entry."""
        return self._chunks(path, None)

    @contextlib.asynccontextmanager
    async def _chunks(self, path: str, limit: int | None) -> AsyncIterator[AsyncIterator[bytes]]:
        resolved = await self._policy.resolve_read(path, self._stat)
        fd = await asyncio.to_thread(_open_regular, resolved.path, path)
        chunks = ThreadedChunks(lambda: os.read(fd, READ_CHUNK_BYTES))
        try:
            if limit is not None:
                check_size(path, os.fstat(fd).st_size, limit)  # before a byte is read
            yield chunks
        finally:
            await chunks.aclose()  # a read may still run in its thread
            os.close(fd)

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path``, creating parents; symlinks are never followed."""
        resolved = await self._policy.resolve_write(path, self._stat)
        await asyncio.to_thread(_write, resolved, path, bytes(data))

    async def write_stream(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """Create or replace ``path`` from ``chunks`` (memory O(chunk)), atomically.

        The chunks go to a temporary beside the target, renamed over it after
        the last one; any failure removes the temporary and keeps the old file.
        """
        resolved = await self._policy.resolve_write(path, self._stat)
        await asyncio.to_thread(_make_dirs, resolved)
        temporary = staging_name(resolved.path)
        fd = await asyncio.to_thread(_create_new, temporary)
        try:
            async for chunk in checked_chunks(chunks):
                await asyncio.to_thread(_write_all, fd, chunk)
            await asyncio.to_thread(os.close, fd)
            fd = -1
            await asyncio.to_thread(os.rename, temporary, resolved.path)
        except BaseException:
            _abandon(fd, temporary)  # at once: a cancelled write still cleans up
            raise

    async def destroy(self) -> None:
        """Remove the box and stop its commands; idempotent."""
        await asyncio.to_thread(remove_box, self._box)

    async def _stat(self, path: str) -> Entry | None:
        """The policy's stat callback: ``lstat``, never following the last component."""
        try:
            info = await asyncio.to_thread(os.lstat, path)
        except (FileNotFoundError, NotADirectoryError):
            if path == self.root:
                raise SandboxNotFound(f"{self._ref} no longer exists") from None
            return None
        return Entry.from_mode(info.st_mode, info.st_size)

    async def _gone(self) -> bool:
        return not await asyncio.to_thread((self._box / OWNER).exists)


def remove_box(box: Path) -> None:
    """Rename the box away (attach and new commands fail at once), stop its commands, delete it.

    Any process may call it: the commands are found by the box's ``runs``
    records, not by what this process started.
    """
    retire_dir(box)  # the commit point: <box> becomes <box>.deleting-<token>
    for doomed in leftovers(box):
        with contextlib.suppress(FileNotFoundError):
            for record in (doomed / RUNS).iterdir():
                # A record left by a crashed worker may name a recycled pid: kill
                # only the group whose leader started when the record says.
                if record.name.isdigit() and record.read_text() == _started_at(int(record.name)):
                    _kill_group(int(record.name))
    purge_leftovers(box)


def _started_at(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks after boot), or "" if it is unknown."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat_line.rsplit(")", 1)[-1].split()[19]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _pump(stream: asyncio.StreamReader, channel: ExecChannel, which: OutputStream) -> None:
    """Read one pipe to the end into the channel (it keeps the first ``cap`` bytes)."""
    while chunk := await stream.read(65536):
        await channel.send(which, chunk)


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    stream.close()


def _make_dirs(resolved: ResolvedPath) -> None:
    for directory in resolved.missing_dirs:  # outermost first
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory)  # noqa: PTH102 - a path string from the policy


def _open_regular(target: str, path: str) -> int:
    """Open the checked file without following a link swapped in since the check."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathEscapeError(f"{path!r} is a symlink") from None
        raise
    try:
        check_regular(Entry.from_mode(os.fstat(fd).st_mode), path=path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(resolved: ResolvedPath, path: str, data: bytes) -> None:
    _make_dirs(resolved)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(resolved.path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathEscapeError(f"{path!r} is a symlink") from None
        raise
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _create_new(target: str) -> int:
    """A fresh file for a streamed write (never an existing one, never through a link)."""
    return os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _abandon(fd: int, temporary: str) -> None:
    """Close (if open) and remove a failed streamed write's temporary."""
    if fd >= 0:
        os.close(fd)
    with contextlib.suppress(OSError):
        Path(temporary).unlink()
