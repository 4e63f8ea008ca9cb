"""The capability ``background-processes`` for a remote sandbox whose vendor runs a line detached.

A vendor's background command (Daytona's session commands, OpenSandbox
execd's background commands) starts a shell line and reports on it in its
own terms: Daytona returns a command's whole log at every call, neither lists
its commands to a fresh client by anything of ours, neither forwards stdin to
a background command, and their exit codes cannot tell a kill from a signal.
The promises of :class:`~mango.provider.ProcessSandbox` (a listing, a
byte-offset log kept to a cap, stdin that stays open, a tree kill, an exit
status and a kill any worker can read) are kept by the kit's supervisor
(:mod:`mango.provider.processes`) instead, and :class:`ShellProcesses` reads
its files with short execs. The vendor's part is one method,
:meth:`ShellProcesses._launch`: run the line detached; a vendor that keeps
the output itself (execd, by byte cursor) is read by :meth:`_read_log`.

Every call is a bounded exec: a wait is a series of execs of at most
:data:`WAIT_SLICE_SECONDS` each that poll the files inside the sandbox, so
no wait depends on one long-lived stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from mango.domain.errors import (
    PermanentError,
    ProcessNotFound,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.domain.limits import DEFAULT_MAX_PROCESS_LOG_BYTES
from mango.domain.sandbox_ports import ProcessHandle, ProcessInfo, ProcessOutput, ProcessState
from mango.domain.values import Command, ExecResult
from mango.provider.processes import (
    PROCESS_DIR,
    ProcessRecord,
    check_process_id,
    check_window,
    launch_line,
    listing_line,
    log_line,
    new_process_id,
    output_slice,
    parse_listing,
    parse_log_answer,
    process_directory,
    stdin_line,
    wait_line,
)
from mango.provider.shell import kill_tree_line, quote

__all__ = ["CALL_SECONDS", "WAIT_SLICE_SECONDS", "ShellProcesses"]

WAIT_SLICE_SECONDS = 20.0
"""The longest one waiting exec polls inside the sandbox before the client asks again."""
CALL_SECONDS = 30.0
"""Bound on every other exec of the table (listing, log read, stdin, kill)."""


class ShellProcesses:
    """Mixin: :class:`~mango.provider.ProcessSandbox` over ``exec`` and a detached ``_launch``.

    The sandbox class supplies ``exec``, ``root``, ``sandbox_id``,
    ``_output_cap`` (as every remote sandbox does) and ``_launch``; it may
    override ``_forget`` to release the vendor's record of an ended process.
    """

    __slots__ = ()
    _process_root: ClassVar[str] = PROCESS_DIR
    """Where the table lives in the sandbox (a provider-owned directory the sandbox user
    may write: Daytona's user is not root)."""

    if TYPE_CHECKING:

        @property
        def root(self) -> str: ...
        @property
        def sandbox_id(self) -> str: ...
        async def exec(self, command: Command) -> ExecResult: ...
        def _output_cap(self) -> int: ...

    _launch_detach: ClassVar[bool] = True
    """The launch line runs the supervisor as a child (a session shell that lives on)."""
    _launch_new_session: ClassVar[bool] = True
    """The supervisor makes its own session (False: the vendor starts a group leader)."""
    _vendor_log: ClassVar[bool] = False
    """The output stays on the vendor's log, read by :meth:`_read_log` (no ``log`` file)."""
    _process_log_cap: ClassVar[int] = DEFAULT_MAX_PROCESS_LOG_BYTES
    """The bytes of log the supervisor keeps (the oldest dropped first)."""

    async def _launch(self, line: str, process_id: str) -> str | None:
        """Run ``line`` (``sh`` syntax) detached from this call; return once it was started.

        Returns the vendor's id of the command, if it has one worth keeping
        (it is written to the process's ``vendor`` file).
        """
        raise NotImplementedError

    async def _read_log(
        self, record: ProcessRecord, since: int, limit: int
    ) -> tuple[bytes, int, int]:
        """At most ``limit`` bytes of the log from ``since`` (or its first kept byte), the
        log's size and the bytes dropped before it (one exec)."""
        directory = process_directory(record.id, self._process_root)
        answer = await self._run(log_line(directory, since, limit))
        data, _offset, size, dropped = parse_log_answer(answer, since)
        return data[:limit], size, dropped

    async def _kill_tree(self, record: ProcessRecord, marker: str) -> None:
        """Run ``marker`` (writes ``killed``), then kill the supervisor's group: one exec."""
        kill = kill_tree_line(record.pid) if record.pid is not None else "exit 0"
        await self._run(f"{marker}; {kill}")

    async def _forget(self, process_id: str) -> None:
        """Release the vendor's record of the ended process ``process_id`` (default: nothing)."""

    async def _run(self, line: str, *, stdin: bytes = b"", seconds: float = CALL_SECONDS) -> bytes:
        result = await self.exec(Command(("/bin/sh", "-c", line), stdin=stdin, timeout=seconds))
        if result.cancelled:
            # exec's word for a sandbox torn down while the line ran.
            raise SandboxNotFound(f"sandbox {self.sandbox_id!r} was destroyed")
        if result.exit_code != 0 or result.stdout_truncated:
            raise ProviderUnavailable(
                f"background processes: a table command failed (exit {result.exit_code}): "
                f"{result.stderr[:200].decode(errors='replace')}"
            )
        return result.stdout

    async def _records(self, process_id: str | None = None) -> list[ProcessRecord]:
        text = await self._run(listing_line(self._process_root, process_id))
        return parse_listing(text.decode("utf-8", errors="replace"))

    async def _record(self, process_id: str) -> ProcessRecord:
        check_process_id(process_id)
        records = await self._records(process_id)
        if not records:
            raise ProcessNotFound(process_id)
        return records[0]

    async def start(self, command: Command) -> ProcessHandle:
        """Launch the supervisor; send ``command.stdin`` through its FIFO."""
        process_id = new_process_id()
        directory = process_directory(process_id, self._process_root)
        line = launch_line(
            command,
            datetime.now(UTC),
            root=self.root,
            directory=directory,
            detach=self._launch_detach,
            new_session=self._launch_new_session,
            log=not self._vendor_log,
            cap=self._process_log_cap,
        )
        vendor = await self._launch(line, process_id)
        # The supervisor writes its pid (and makes its FIFO) first: wait for that, bounded.
        pid_file = quote(directory + "/pid")
        keep = (
            ""
            if vendor is None
            else f"printf %s {quote(vendor)} > {quote(directory + '/vendor')}; "
        )
        ready = (
            f"i=0; while [ ! -s {pid_file} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
            f"{keep}cat {pid_file} 2>/dev/null; exit 0"
        )
        pid_text = (await self._run(ready)).strip()
        pid = int(pid_text) if pid_text.isdigit() else None
        if command.stdin:
            await self._run(stdin_line(directory), stdin=command.stdin)
        return ProcessHandle(process_id, pid)

    async def processes(self) -> Sequence[ProcessInfo]:
        """Every process in the table, oldest first."""
        return [record.info(running=record.alive) for record in await self._records()]

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        """The state first (one exec), then the slice and the log's size (:meth:`_read_log`)."""
        # The slice travels in one exec's stdout after a size line: it stays under the exec cap.
        room = max(1, self._output_cap() - 32)
        limit = min(check_window(since, max_bytes, self._output_cap()), room)
        record = await self._record(process_id)
        ended = record.info(running=record.alive).state is not ProcessState.RUNNING
        data, size, dropped = await self._read_log(record, since, limit)
        return output_slice(data[:limit], since=since, size=size, ended=ended, dropped=dropped)

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        """Bounded waiting execs until the end or ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        directory = process_directory(process_id, self._process_root)
        while True:
            record = await self._record(process_id)
            info = record.info(running=record.alive)
            if info.state is not ProcessState.RUNNING:
                return info
            left = WAIT_SLICE_SECONDS if deadline is None else deadline - loop.time()
            if left <= 0:
                return info
            seconds = min(left, WAIT_SLICE_SECONDS)
            await self._run(wait_line(directory, seconds), seconds=seconds + CALL_SECONDS)

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """Copy ``data`` into the process's FIFO (the command reads it as stdin)."""
        record = await self._record(process_id)
        if record.info(running=record.alive).state is not ProcessState.RUNNING:
            raise PermanentError(f"background process {process_id} has ended: no stdin")
        if data:
            directory = process_directory(process_id, self._process_root)
            await self._run(stdin_line(directory), stdin=bytes(data))

    async def kill(self, process_id: str) -> ProcessInfo:
        """Write ``killed`` and kill the supervisor's group in one exec; then the end (bounded)."""
        record = await self._record(process_id)
        info = record.info(running=record.alive)
        if info.state is not ProcessState.RUNNING:
            return info
        marker = quote(process_directory(process_id, self._process_root) + "/killed")
        await self._kill_tree(record, f": > {marker}")
        ended = await self.wait(process_id, timeout=CALL_SECONDS)
        await self._forget(process_id)
        return ended
