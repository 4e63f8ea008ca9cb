"""The sandbox API beyond exec and files: a file API, background processes, pause, ports.

Each is an optional capability (re-exported by :mod:`mango.domain.ports`): a
provider that declares it hands out sandboxes implementing its protocol,
the mango-conformance suite checks the contract below, and SessionManager
refuses the operation with :class:`~mango.domain.errors.CapabilityNotSupported`
where a provider does not declare it. Nothing here is emulated badly: a
backend that cannot keep a promise below does not declare the capability.

========================  ==============================  =================================
capability                protocol                        what it gives
========================  ==============================  =================================
``file-api``              :class:`FileSystemSandbox`      list, stat, exists, remove,
                                                          rename, make a directory
``background-processes``  :class:`ProcessSandbox`         start, list, logs from an offset,
                                                          wait, stdin, kill; durable ids
``pause``                 :class:`PausableSandbox`,       explicit pause and resume (the
                          :class:`PausableProvider`       provider's form: by reference)
``exposed-ports``         :class:`PortSandbox`            a URL for a port in the sandbox
                                                          (:class:`ExposedPort`)
========================  ==============================  =================================

Paths follow the same policy as ``read_file``/``write_file``
(:mod:`mango.domain.paths`, :mod:`mango.provider.paths`): workspace-relative,
no ``..``, no escape through a symlink in any *parent* component, including
one swapped in during the call. The file API's operations do not follow the
*last* component (``lstat`` semantics): ``stat`` of a link reports
:attr:`FileKind.SYMLINK` with the link's own size, ``remove`` unlinks the link
itself, ``rename`` moves the link, and a listing reports links without
following them. ``list_dir`` of a link, and ``make_dir`` of or through one, raise
:class:`~mango.domain.errors.PathEscapeError`. The workspace root itself
(``""`` or ``"."``) may be listed and stat-ed but never removed, renamed or
renamed onto (:class:`~mango.domain.errors.InvalidPathError`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import attrs

from mango.domain.errors import InvalidInput
from mango.domain.values import Command, SandboxRef

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "MAX_LIST_LIMIT",
    "DirectoryListing",
    "ExposedPort",
    "FileInfo",
    "FileKind",
    "FileSystemSandbox",
    "PausableProvider",
    "PausableSandbox",
    "PortSandbox",
    "ProcessHandle",
    "ProcessInfo",
    "ProcessOutput",
    "ProcessSandbox",
    "ProcessState",
    "check_port",
]

DEFAULT_LIST_LIMIT = 1000
"""How many entries :meth:`FileSystemSandbox.list_dir` returns when no limit is given."""
MAX_LIST_LIMIT = 100_000
"""The largest ``limit`` a listing accepts (memory stays O(limit), whatever the directory)."""


def _aware(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime, got {value!r}")


class FileKind(enum.StrEnum):
    """What a path names, seen without following its last component."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"
    """A FIFO, socket, device, or anything that is neither file, directory nor link."""


@attrs.frozen
class FileInfo:
    """One entry of a listing or the answer of a stat.

    ``path`` is workspace-relative and ``/``-separated (``""`` for the root),
    ``name`` its last component. ``size`` is in bytes (a link's own size, a
    directory's as the backend reports it), ``mode`` the permission bits
    (``0o7777`` at most; ``None`` where the backend does not report them),
    ``mtime`` the modification time in UTC (``None`` where not reported).
    """

    path: str
    name: str
    kind: FileKind = attrs.field(converter=FileKind)
    size: int
    mode: int | None = None
    mtime: datetime | None = attrs.field(default=None, validator=_aware)


@attrs.frozen
class DirectoryListing:
    """A bounded listing: at most the requested limit of entries, in a stable order.

    ``entries`` are sorted by path (code-point order of the ``/``-separated
    strings, what ``LC_ALL=C sort`` gives), and a truncated listing holds the
    *first* ``limit`` entries in that order, whatever order the backend read
    them in. ``truncated`` says that more entries exist than were returned
    (the listing stopped at the limit).
    """

    entries: tuple[FileInfo, ...]
    truncated: bool = False


@runtime_checkable
class FileSystemSandbox(Protocol):
    """Capability ``file-api``: list, stat, remove, rename and make directories.

    Errors: a missing path (or missing parent) is :class:`FileNotFoundError`
    (as for ``read_file``); an existing destination where none may be is
    :class:`~mango.domain.errors.PathExists`; removing a non-empty directory
    without ``recursive`` is :class:`~mango.domain.errors.DirectoryNotEmpty`;
    a parent that is not a directory, or listing something that is not one,
    is a :class:`~mango.domain.errors.PermanentError`; escapes are
    :class:`~mango.domain.errors.PathEscapeError`; a vanished sandbox is
    :class:`~mango.domain.errors.SandboxNotFound`.
    """

    async def list_dir(
        self, path: str = "", *, recursive: bool = False, limit: int = DEFAULT_LIST_LIMIT
    ) -> DirectoryListing:
        """The entries below the directory ``path`` (not ``path`` itself), sorted by path.

        ``recursive`` descends into sub-directories (never into links). At most
        ``limit`` entries (1 to :data:`MAX_LIST_LIMIT`, else
        :class:`~mango.domain.errors.InvalidInput`) are returned, and the
        provider never holds more than a bounded number in memory: a directory
        with a million entries is not loaded whole. ``truncated`` is set when
        entries were left out.
        """
        ...

    async def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names, without following a last-component link."""
        ...

    async def exists(self, path: str) -> bool:
        """True if ``path`` names an entry (a dangling link exists); escapes still raise."""
        ...

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a link (not its target) or an empty directory.

        With ``recursive``, a directory and everything below it (never
        following a link out). A missing path is :class:`FileNotFoundError`.
        """
        ...

    async def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination`` in the workspace, atomically where the backend can.

        ``destination`` must not exist (:class:`~mango.domain.errors.PathExists`);
        its parent must (:class:`FileNotFoundError`).
        """
        ...

    async def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Create the directory ``path``.

        With ``parents`` (``mkdir -p``) missing parents are made and an existing
        directory is success; without it the parent must exist and ``path`` must
        not (:class:`~mango.domain.errors.PathExists`). An existing non-directory
        is :class:`~mango.domain.errors.PathExists` either way, except a link
        (:class:`~mango.domain.errors.PathEscapeError`, as for a link above it).
        """
        ...


class ProcessState(enum.StrEnum):
    """Where a background process is."""

    RUNNING = "running"
    EXITED = "exited"
    """It ended by itself; ``exit_code`` is its status (negative: killed by that signal)."""
    KILLED = "killed"
    """It was ended by :meth:`ProcessSandbox.kill`."""


@attrs.frozen
class ProcessHandle:
    """A started background process: its durable id, and its pid where the backend tells.

    ``id`` is what every other call takes; it stays valid in any worker
    process, after a restart, for as long as the sandbox lives.
    """

    id: str
    pid: int | None = None


@attrs.frozen
class ProcessInfo:
    """A background process as listed or waited for."""

    id: str
    argv: tuple[str, ...]
    state: ProcessState = attrs.field(converter=ProcessState)
    pid: int | None = None
    exit_code: int | None = None
    started_at: datetime | None = attrs.field(default=None, validator=_aware)


@attrs.frozen
class ProcessOutput:
    """A slice of a background process's output log, stdout and stderr as written.

    ``data`` starts at byte ``offset`` of the log and ``next_offset`` is where
    the next call continues (``offset + len(data)``). ``complete`` says that
    the process has ended and ``next_offset`` is the end of its log: nothing
    more will come. ``dropped`` counts bytes the provider discarded before
    ``offset`` because the log outgrew its cap (the oldest go first), so a
    reader that asked for an earlier offset knows what it missed: it is the
    total discarded so far (the log's first kept byte), and a ``since``
    earlier than that is answered from the first kept byte (``offset`` is
    then larger than ``since``). Offsets always count from the process's
    first byte of output, dropped bytes included.
    """

    data: bytes
    offset: int
    next_offset: int
    complete: bool
    dropped: int = 0


@runtime_checkable
class ProcessSandbox(Protocol):
    """Capability ``background-processes``: commands that outlive the call that started them.

    A process started here runs until it exits, is killed, or its sandbox is
    destroyed (a destroy kills every process tree it started: a process never
    outlives its sandbox). Its id is durable: a fresh provider instance in
    another worker process lists it, reads its logs and kills it. Its output
    (stdout and stderr in one log, in the order written) is kept by the
    provider up to a cap, the oldest bytes dropped first. An unknown id is
    :class:`~mango.domain.errors.ProcessNotFound`.
    """

    async def start(self, command: Command) -> ProcessHandle:
        """Start ``command`` in the background (argv, env and cwd as for exec).

        ``command.stdin`` is written to the process's stdin first; stdin then
        stays open for :meth:`send_stdin` as long as the process runs (it
        never reads end-of-file).

        ``command.timeout``, if set, ends the process tree after that many
        seconds (state :attr:`ProcessState.KILLED`); else it runs unbounded.
        Returns once the process has started; a program that cannot be
        started is a process that exited with 127, as for exec.
        """
        ...

    async def processes(self) -> Sequence[ProcessInfo]:
        """Every background process started in this sandbox and not yet forgotten, oldest first."""
        ...

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        """Output from byte ``since`` on, at most ``max_bytes`` (default: the exec output cap).

        A ``since`` past the end written so far answers no data at ``since``;
        a negative ``since`` or a ``max_bytes`` below 1 is
        :class:`~mango.domain.errors.InvalidInput`.
        """
        ...

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        """Wait until the process ends or ``timeout`` seconds pass; return its state then.

        A timeout is not an error: the answer is still :attr:`ProcessState.RUNNING`.
        Cancelling the wait leaves the process running.
        """
        ...

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """Write ``data`` to the process's stdin; an ended process is a PermanentError."""
        ...

    async def kill(self, process_id: str) -> ProcessInfo:
        """End the process and its whole tree; idempotent for an ended process."""
        ...


@runtime_checkable
class PausableSandbox(Protocol):
    """Capability ``pause``: the backend keeps the sandbox's state while it runs nothing.

    A paused sandbox keeps its workspace and its processes' memory (Docker
    pause, E2B pause, Daytona stop, OpenSandbox pause); SessionManager resumes
    it on the next acquire.
    """

    async def pause(self) -> None:
        """Pause the sandbox; idempotent for a paused one."""
        ...

    async def resume(self) -> None:
        """Resume the sandbox; idempotent for a running one."""
        ...

    async def is_paused(self) -> bool:
        """Ask the backend whether the sandbox is paused now."""
        ...


@runtime_checkable
class PausableProvider(Protocol):
    """Capability ``pause``, the provider's form: pause and resume a resource by reference.

    What SessionManager calls: like
    :meth:`~mango.domain.ports.Provider.destroy`, it works from the binding
    alone (the idle eviction, ``mango sessions pause`` and a restarted worker
    know no spec to attach with). Each checks that ``ref`` belongs to
    ``session_key`` (:class:`~mango.domain.errors.OwnershipError` if not) and
    raises :class:`~mango.domain.errors.SandboxNotFound` for a resource that
    is gone; both are idempotent. A provider declaring ``pause`` implements
    this and hands out :class:`PausableSandbox` sandboxes, and the two agree:
    a sandbox paused one way is paused for the other.
    """

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        """Pause the resource ``ref`` of ``session_key``; idempotent for a paused one."""
        ...

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        """Resume the resource ``ref`` of ``session_key``; idempotent for a running one."""
        ...


def check_port(port: object) -> int:
    """``port`` if it is a TCP port number (1 to 65535), else :class:`InvalidInput`."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidInput(f"a port is a number from 1 to 65535, got {port!r}")
    return port


def _exposed_url(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"an exposed port's url is a string, got {type(value).__name__}")
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("an exposed port's url is an absolute http(s) URL")
    if "@" in parts.netloc:
        # A user:password in the URL would be logged wherever the URL is.
        raise ValueError("an exposed port's url carries no credential")


def _frozen_headers(value: Mapping[str, str]) -> Mapping[str, str]:
    headers = dict(value)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise TypeError("an exposed port's headers map strings to strings")
    return MappingProxyType(headers)


@attrs.frozen(repr=False)
class ExposedPort:
    """Where a port in the sandbox is reached: a URL, and the headers each request needs.

    ``url`` is an ``http(s)://`` URL with no credential in it (safe to log
    and to store). ``headers`` are what a request to it must carry where the
    backend authenticates or routes by header (Daytona's preview token,
    OpenSandbox's ingress route); they may be secrets, so :func:`repr` shows
    their names only. ``str()`` is the URL. Docker's are empty.
    """

    url: str = attrs.field(validator=_exposed_url)
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_headers, hash=False)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.headers))
        return f"ExposedPort(url={self.url!r}, headers=<{names or 'none'}>)"


@runtime_checkable
class PortSandbox(Protocol):
    """Capability ``exposed-ports``: reach a server listening in the sandbox."""

    async def expose_port(self, port: int) -> ExposedPort:
        """Where ``port`` (1 to 65535, else :class:`~mango.domain.errors.InvalidInput`) is reached.

        Docker publishes on 127.0.0.1 only; remote backends return their
        preview, endpoint or proxy URL with the headers a request to it needs
        (:class:`ExposedPort`). The URL carries no credential; a token goes in
        :attr:`ExposedPort.headers`. A sandbox that is gone is
        :class:`~mango.domain.errors.SandboxNotFound`. A backend may answer
        before anything listens: the URL then fails until a server does.
        """
        ...
