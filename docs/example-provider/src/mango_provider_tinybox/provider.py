"""The tinybox provider: one host directory per Session key, commands as host process groups.

Layout under the base directory::

    <base>/<id>/owner        the ownership labels, JSON (never the Session key itself)
    <base>/<id>/workspace/   the workspace root: cwd and HOME of commands
    <base>/<id>/runs/<pgid>  one file per running command (its start time), so that a
                             destroy from any process can stop what runs in the box

``<id>`` and the labels come from :class:`mango.provider.ownership.Ownership`:
``<id>`` is the deterministic name of (provider, deployment namespace, key),
so create is idempotent (the same key always finds the same directory),
attach can check ownership without a database, and two deployments sharing
a base directory never share a box. **Not an isolation boundary**: commands
run as the worker's user on the worker's host.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import shutil
import signal
import stat
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from mango.provider import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_READ_BYTES,
    CapabilitySet,
    Command,
    ConfigurationError,
    ExecResult,
    OutputStream,
    OwnedResource,
    OwnershipError,
    PathEscapeError,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    max_output_bytes,
    max_read_bytes,
    split_workspace_path,
)
from mango.provider.execution import StreamedExec, torn_down
from mango.provider.output import ExecChannel
from mango.provider.ownership import NAME_PREFIX, Ownership, derived_namespace
from mango.provider.reads import (
    READ_CHUNK_BYTES,
    BoundedBuffer,
    ThreadedChunks,
    check_size,
    read_limit,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "PROVIDER_NAME",
    "TinyboxProvider",
    "TinyboxSandbox",
    "open_conformance_provider",
]

PROVIDER_NAME = "tinybox"

_OWNER = "owner"
_WORKSPACE = "workspace"
_RUNS = "runs"
_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_SECONDS = 1.0
"""After a kill, how long the output pipes may stay open before they are abandoned."""


class TinyboxProvider:
    """Sandboxes as directories under ``base_dir``; a fresh instance finds what others made."""

    def __init__(
        self,
        base_dir: Path,
        *,
        namespace: str,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.ownership = Ownership(PROVIDER_NAME, namespace)
        self.max_output_bytes = max_output_bytes
        self.max_read_bytes = max_read_bytes

    @classmethod
    def from_settings(cls, environ: Mapping[str, str], *, namespace: str) -> TinyboxProvider:
        """Build from the settings in ``environ``: ``TINYBOX_DIR`` and the shared output and
        read caps (``MANGO_MAX_OUTPUT_BYTES``, ``MANGO_MAX_READ_BYTES``)."""
        value = environ.get("TINYBOX_DIR", "")
        if not value or not Path(value).is_absolute():
            raise ConfigurationError(
                "TINYBOX_DIR must be an absolute directory",
                hint="export TINYBOX_DIR=/var/lib/tinybox",
            )
        return cls(
            Path(value),
            namespace=namespace,
            max_output_bytes=max_output_bytes(environ),  # range-checked, ConfigurationError
            max_read_bytes=max_read_bytes(environ),
        )

    @property
    def name(self) -> str:
        """Always ``tinybox``."""
        return PROVIDER_NAME

    @property
    def capabilities(self) -> CapabilitySet:
        """No optional capability: only the core contract."""
        return CapabilitySet()

    async def create(self, session_key: str, spec: SandboxSpec) -> TinyboxSandbox:
        """Create-if-absent the directory of ``session_key``; the same key gives the same ref."""
        external_id = self.ownership.name(session_key)  # InvalidInput if the key is empty
        await asyncio.to_thread(self._ensure, external_id, session_key)  # mkdir -p, owner record
        return self._sandbox(external_id, spec)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> TinyboxSandbox:
        """Check that ``ref`` is this provider's and belongs to ``session_key``; never creates."""
        if await self._owned(session_key, ref) is None:
            raise SandboxNotFound(f"{ref} no longer exists")
        return self._sandbox(ref.external_id, spec)

    async def find(self, session_key: str) -> SandboxRef | None:
        """The ref of ``session_key``'s box, or None; read-only."""
        ref = SandboxRef(PROVIDER_NAME, self.ownership.name(session_key))
        return await self._owned(session_key, ref)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        """Remove ``ref``'s box after checking its owner record; idempotent."""
        await self._owned(session_key, ref)
        await asyncio.to_thread(_remove, self.base_dir / ref.external_id)

    async def list_owned(self) -> Sequence[OwnedResource]:
        """Every box under ``base_dir`` whose owner record names this namespace."""
        return await asyncio.to_thread(self._list)

    async def health(self) -> str:
        """The base directory exists (or can be made) and is a directory."""
        try:
            await asyncio.to_thread(self.base_dir.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderUnavailable(f"tinybox base {self.base_dir} is unusable: {exc}") from exc
        return f"base directory {self.base_dir}"

    async def aclose(self) -> None:
        """Nothing to release."""

    async def _owned(self, session_key: str, ref: SandboxRef) -> SandboxRef | None:
        """``ref`` if ``session_key`` owns it, None if it is gone; OwnershipError otherwise."""
        if ref.provider != PROVIDER_NAME:
            raise OwnershipError(f"{ref} belongs to provider {ref.provider!r}")
        if ref.external_id != self.ownership.name(session_key):
            raise OwnershipError(f"{ref} does not belong to this session")
        labels = await asyncio.to_thread(_read_owner, self.base_dir / ref.external_id)
        if labels is None:
            return None  # gone: attach raises SandboxNotFound, find returns None
        self.ownership.check(labels, session_key, what=f"tinybox {ref.external_id}")
        return ref

    def _sandbox(self, external_id: str, spec: SandboxSpec) -> TinyboxSandbox:
        return TinyboxSandbox(
            SandboxRef(PROVIDER_NAME, external_id),
            self.base_dir / external_id,
            spec,
            self.max_output_bytes,
            self.max_read_bytes,
        )

    def _ensure(self, external_id: str, session_key: str) -> None:
        box = self.base_dir / external_id
        (box / _WORKSPACE).mkdir(parents=True, exist_ok=True)
        (box / _RUNS).mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = os.open(box / _OWNER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(fd, "w") as handle:
                json.dump(self.ownership.labels(session_key), handle)
        self.ownership.check(_read_owner(box), session_key, what=f"tinybox {external_id}")

    def _list(self) -> list[OwnedResource]:
        if not self.base_dir.is_dir():
            return []
        owned = []
        for box in sorted(self.base_dir.iterdir()):
            if box.name.startswith(NAME_PREFIX) and "." not in box.name:
                session_hash = self.ownership.owned_hash(_read_owner(box))
                if session_hash is not None:
                    owned.append(OwnedResource(SandboxRef(PROVIDER_NAME, box.name), session_hash))
        return owned


def _read_owner(box: Path) -> dict[str, object] | None:
    try:
        labels = json.loads((box / _OWNER).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return labels if isinstance(labels, dict) else {}


def _remove(box: Path) -> None:
    """Rename the box away (attach and new commands fail at once), stop its commands, delete it.

    Any process may call it: the commands are found by the box's ``runs``
    records, not by what this process started.
    """
    doomed = box.with_name(f"{box.name}.deleting-{secrets.token_hex(4)}")
    try:
        box.rename(doomed)
    except FileNotFoundError:
        return
    with contextlib.suppress(FileNotFoundError):
        for record in (doomed / _RUNS).iterdir():
            # A record left by a crashed worker may name a recycled pid: kill only
            # the group whose leader started when the record says.
            if record.name.isdigit() and record.read_text() == _started_at(int(record.name)):
                _kill_group(int(record.name))
    shutil.rmtree(doomed, ignore_errors=True)


def _started_at(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks after boot), or "" if it is unknown."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat_line.rsplit(")", 1)[-1].split()[19]


def _record_run(runs: Path, pid: int) -> Path:
    """Write the ``runs`` record of a started command; FileNotFoundError if the box is gone."""
    record = runs / str(pid)
    record.write_text(_started_at(pid))
    return record


async def _pump(stream: asyncio.StreamReader, channel: ExecChannel, which: OutputStream) -> None:
    """Read one pipe to the end into the channel (it keeps the first ``cap`` bytes)."""
    while chunk := await stream.read(65536):
        await channel.send(which, chunk)


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    stream.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class TinyboxSandbox(StreamedExec):
    """One tinybox: a workspace directory and the commands run in it.

    ``exec`` and ``exec_stream`` come from the kit's :class:`StreamedExec`:
    this class only says how to run one command into an output channel
    (``_exec_body``); the kit caps the output, streams it or buffers it.
    """

    def __init__(
        self, ref: SandboxRef, box: Path, spec: SandboxSpec, cap: int, read_cap: int
    ) -> None:
        self._ref = ref
        self._box = box
        self._spec = spec
        self._max_output_bytes = cap
        self._max_read_bytes = read_cap

    @property
    def ref(self) -> SandboxRef:
        """``tinybox:<id>``."""
        return self._ref

    @property
    def root(self) -> str:
        """The host path of the workspace."""
        return str(self._box / _WORKSPACE)

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        """Run ``command`` in its own process group, feeding its output to ``channel``."""
        cwd = await asyncio.to_thread(self._directory, command.cwd)
        env = {"PATH": _PATH, "HOME": self.root, **command.env_dict}
        try:
            process = await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=asyncio.subprocess.PIPE if command.stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=env,
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
        try:
            # Record first, so a destroy from any process finds the command; a box
            # already renamed away by a destroy means the command must not run.
            record = await asyncio.to_thread(_record_run, self._box / _RUNS, process.pid)
        except FileNotFoundError:
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
            with contextlib.suppress(FileNotFoundError):
                record.unlink()
        returncode = process.returncode if process.returncode is not None else -1
        if returncode == -signal.SIGKILL and not timed_out and await torn_down(self._gone):
            # Killed by a destroy (here or in another process): say so.
            return channel.result(exit_code=-1, cancelled=True)
        return channel.result(
            exit_code=-1 if timed_out else (128 - returncode if returncode < 0 else returncode),
            timed_out=timed_out,
        )

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular file of at most ``max_bytes`` (default: the read cap).

        FileTooLarge past the bound (the size is checked before reading),
        FileNotFoundError, PermanentError or PathEscapeError.
        """
        limit = read_limit(max_bytes, self._max_read_bytes)
        return await asyncio.to_thread(self._read, path, limit)

    @contextlib.asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a regular file in chunks, whatever its size; the path is checked on entry."""
        fd = await asyncio.to_thread(self._open, path)
        chunks = ThreadedChunks(lambda: os.read(fd, READ_CHUNK_BYTES))
        try:
            yield chunks
        finally:
            await chunks.aclose()  # a read may still run in its thread
            os.close(fd)

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path``, creating parents; symlinks are never followed."""
        await asyncio.to_thread(self._write, path, bytes(data))

    async def destroy(self) -> None:
        """Remove the directory; idempotent. Renaming first makes attach fail at once."""
        await asyncio.to_thread(self._remove)

    async def _gone(self) -> bool:
        return not await asyncio.to_thread((self._box / _OWNER).exists)

    # -- blocking helpers, run in a thread --------------------------------------

    def _workspace(self) -> Path:
        root = self._box / _WORKSPACE
        if not root.is_dir():
            raise SandboxNotFound(f"{self._ref} no longer exists")
        return root

    def _walk(self, parts: tuple[str, ...], path: str, *, create: bool) -> Path:
        """The directory ``parts`` below the workspace, refusing symlinks on the way."""
        current = self._workspace()
        for part in parts:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(errno.ENOENT, "no such directory", path) from None
                current.mkdir()
                continue
            if stat.S_ISLNK(mode):
                raise PathEscapeError(f"{path!r} goes through the symlink {part!r}")
            if not stat.S_ISDIR(mode):
                raise PermanentError(f"{path!r}: {part!r} is not a directory")
        return current

    def _directory(self, path: str) -> str:
        return str(self._walk(split_workspace_path(path, allow_root=True), path, create=True))

    def _read(self, path: str, limit: int) -> bytes:
        fd = self._open(path)
        with os.fdopen(fd, "rb", buffering=0) as handle:
            check_size(path, os.fstat(fd).st_size, limit)  # before a byte is read
            buffer = BoundedBuffer(path, limit)  # FileTooLarge if it grows past the bound
            while chunk := handle.read(min(READ_CHUNK_BYTES, buffer.remaining + 1)):
                buffer.add(chunk)
            return buffer.getvalue()

    def _open(self, path: str) -> int:
        parts = split_workspace_path(path)  # PathEscapeError for '..' and absolute paths
        target = self._walk(parts[:-1], path, create=False) / parts[-1]
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathEscapeError(f"{path!r} is a symlink") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise PermanentError(f"{path!r} is not a regular file")
        return fd

    def _write(self, path: str, data: bytes) -> None:
        parts = split_workspace_path(path)
        target = self._walk(parts[:-1], path, create=True) / parts[-1]
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(target, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathEscapeError(f"{path!r} is a symlink") from None
            if exc.errno in (errno.EISDIR, errno.ENXIO):
                raise PermanentError(f"{path!r} is not a regular file") from None
            raise
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)

    def _remove(self) -> None:
        _remove(self._box)


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[TinyboxProvider]:
    """The offline conformance target: a provider over ``scratch_dir / "boxes"``.

    Its namespace is derived from ``scratch_dir``: fixed for the run, new for the next.
    """
    provider = TinyboxProvider(
        Path(scratch_dir) / "boxes", namespace=derived_namespace("conformance", str(scratch_dir))
    )
    try:
        yield provider
    finally:
        await provider.aclose()
