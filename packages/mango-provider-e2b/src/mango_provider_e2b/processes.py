"""Background processes in an E2B (or Cube) sandbox: envd's process service, the kit's supervisor.

envd starts a process (``Start`` with a ``tag``: our process id), lists the
running ones (``List``, by tag), streams the output written *while a client
is connected* (``Connect``: no replay of the past) and forwards stdin
(``SendInput``) and signals (``SendSignal``). It forgets a process once it
ends, and older envds keep no exit status for a late ``Connect``. So the
facts a fresh worker needs are kept in the sandbox by the kit's supervisor
(:mod:`mango.provider.processes`): ``meta`` (uploaded before the start), the
log (capped segments, read from a byte offset by one short command), ``exit``
and ``killed``.

A process is running while envd lists its tag and its ``exit``/``killed``
are unwritten. :meth:`ProcessMethods.wait` never hangs on one long-lived
stream: E2B's edge ends streams after a while (a reconnect that failed after
two minutes is a known peer defect), so it ``Connect``s for at most
:data:`WAIT_SLICE_SECONDS` at a time, and after any end of that stream (the
process's ``end``, an error, a cut connection, the slice's end) asks the
files and ``List`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from mango.provider import (
    Command,
    ExecResult,
    MangoError,
    PermanentError,
    ProcessHandle,
    ProcessInfo,
    ProcessNotFound,
    ProcessOutput,
    ProcessState,
    ProviderUnavailable,
    SandboxNotFound,
)
from mango.provider.http import RemoteUnavailable
from mango.provider.processes import (
    PROCESS_DIR,
    ProcessRecord,
    check_process_id,
    check_window,
    listing_line,
    log_line,
    meta_json,
    new_process_id,
    output_slice,
    parse_listing,
    parse_log_answer,
    process_directory,
    supervisor_line,
)
from mango_provider_e2b.execution import (
    KILL_SECONDS,
    ROOT,
    SHELL,
    STDIN_CHUNK_BYTES,
    event_of,
    kill_tree,
    unreachable,
)

if TYPE_CHECKING:
    from mango_provider_e2b.envd import Envd

T = TypeVar("T")

__all__ = ["LIST_SECONDS", "START_SECONDS", "WAIT_SLICE_SECONDS", "ProcessMethods"]

WAIT_SLICE_SECONDS = 30.0
"""The longest one ``Connect`` stream of a wait is held (well inside E2B's stream limits)."""
START_SECONDS = 30.0
"""Bound on envd's ``start`` event after ``Start``."""
LIST_SECONDS = 30.0
"""Bound on the listing command that reads the process directories."""


class ProcessMethods:
    """Capability ``background-processes`` of :class:`~mango_provider_e2b.sandbox.E2BSandbox`."""

    __slots__ = ()

    if TYPE_CHECKING:
        _envd: Envd

        @property
        def sandbox_id(self) -> str: ...

        async def exec(self, command: Command) -> ExecResult: ...
        async def _keep_for(self, seconds: float | None) -> None: ...
        async def _make_dir(self, path: str) -> None: ...
        async def _upload(self, path: str, data: bytes) -> None: ...
        async def _ensure_directory(self, path: str) -> None: ...
        async def _confirm(self, error: MangoError, *, resume: bool) -> None: ...
        async def _data_call(self, call: Callable[[], Awaitable[T]]) -> T: ...
        def _output_cap(self) -> int: ...

    # ------------------------------------------------------------ reading the table

    async def _running(self) -> dict[str, int]:
        try:
            return await self._envd.running()
        except RemoteUnavailable as exc:
            if not unreachable(exc):
                raise
            await self._confirm(exc, resume=True)
        return await self._envd.running()

    async def _shell(self, line: str) -> bytes:
        """Run one short table command; its stdout (a destroy meanwhile: SandboxNotFound)."""
        result = await self.exec(Command(("/bin/sh", "-c", line), timeout=LIST_SECONDS))
        if result.cancelled:
            # The sandbox was torn down while the listing ran (exec's word for a destroy).
            raise SandboxNotFound(f"sandbox {self.sandbox_id!r} was destroyed")
        if result.exit_code != 0 or result.stdout_truncated:
            raise ProviderUnavailable(
                f"reading the background processes failed (exit {result.exit_code}): "
                f"{result.stderr[:200].decode(errors='replace')}"
            )
        return result.stdout

    async def _records(self, process_id: str | None = None) -> list[ProcessRecord]:
        text = await self._shell(listing_line(PROCESS_DIR, process_id))
        return parse_listing(text.decode("utf-8", errors="replace"))

    async def _process_info(self, process_id: str) -> ProcessInfo:
        check_process_id(process_id)
        running = await self._running()  # first: a process that ends after it has its exit written
        records = await self._records(process_id)
        if not records:
            raise ProcessNotFound(process_id)
        return records[0].info(running=process_id in running)

    # ------------------------------------------------------------ the protocol

    async def start(self, command: Command) -> ProcessHandle:
        """Start ``command`` under the supervisor (see the module docstring)."""
        process_id = new_process_id()
        directory = process_directory(process_id)
        await self._keep_for(None)
        if command.cwd:
            await self._ensure_directory(command.cwd)
        await self._make_dir(directory)
        await self._upload(f"{directory}/meta", meta_json(command, datetime.now(UTC)))
        line = supervisor_line(command, root=ROOT, directory=directory)
        pid = await self._start(line, process_id)
        if command.stdin:
            await self._send(pid, process_id, command.stdin)
        return ProcessHandle(process_id, pid)

    async def _start(self, line: str, tag: str) -> int:
        for attempt in range(2):
            try:
                async with (
                    asyncio.timeout(START_SECONDS),
                    self._envd.start(
                        cmd=SHELL, args=["-l", "-c", line], cwd=ROOT, stdin=True, tag=tag
                    ) as envelopes,
                ):
                    async for envelope in envelopes:
                        kind, value = event_of(envelope)
                        pid = value.get("pid")
                        if kind == "start" and isinstance(pid, int):
                            # Leaving the stream leaves the process running (envd's rule).
                            return pid
                        if kind == "end" or envelope.end:
                            break
                raise ProviderUnavailable("envd ended the start stream without a start event")
            except RemoteUnavailable as exc:
                # A 502 never reached envd (a paused sandbox): resume and start again, once.
                if not unreachable(exc) or attempt:
                    raise
                await self._confirm(exc, resume=True)
        raise AssertionError("unreachable: the second start either returned or raised")

    async def processes(self) -> Sequence[ProcessInfo]:
        """Every process this sandbox's table holds, oldest first."""
        running = await self._running()
        return [record.info(running=record.id in running) for record in await self._records()]

    async def logs(
        self, process_id: str, *, since: int = 0, max_bytes: int | None = None
    ) -> ProcessOutput:
        """The log from byte ``since`` (or its first kept byte): one command, at most
        ``max_bytes`` (and under the exec cap)."""
        # The slice travels in one exec's stdout after a size line: it stays under the exec cap.
        room = max(1, self._output_cap() - 64)
        limit = min(check_window(since, max_bytes, self._output_cap()), room)
        ended = (await self._process_info(process_id)).state is not ProcessState.RUNNING
        answer = await self._shell(log_line(process_directory(process_id), since, limit))
        data, _offset, size, dropped = parse_log_answer(answer, since)
        return output_slice(data[:limit], since=since, size=size, ended=ended, dropped=dropped)

    async def wait(self, process_id: str, *, timeout: float | None = None) -> ProcessInfo:
        """Wait for the end in bounded ``Connect`` slices (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        while True:
            info = await self._process_info(process_id)
            if info.state is not ProcessState.RUNNING:
                return info
            left = WAIT_SLICE_SECONDS if deadline is None else deadline - loop.time()
            if left <= 0:
                return info
            await self._until_end(process_id, min(left, WAIT_SLICE_SECONDS))

    async def _until_end(self, tag: str, seconds: float) -> None:
        """Hold one ``Connect`` stream until the process ends, the stream ends, or ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                try:
                    async with self._envd.connect(tag) as envelopes:
                        async for envelope in envelopes:
                            if envelope.end or event_of(envelope)[0] == "end":
                                return
                except RemoteUnavailable as exc:
                    # A cut stream (no status) is the edge's doing: the caller asks again.
                    if exc.status is not None and not unreachable(exc):
                        raise

    async def send_stdin(self, process_id: str, data: bytes) -> None:
        """``SendInput`` to the supervisor's stdin pipe, which the command reads."""
        info = await self._process_info(process_id)
        if info.state is not ProcessState.RUNNING or info.pid is None:
            raise PermanentError(f"background process {process_id} has ended: no stdin")
        await self._send(info.pid, process_id, bytes(data))

    async def _send(self, pid: int, process_id: str, data: bytes) -> None:
        view = memoryview(data)
        for offset in range(0, len(view), STDIN_CHUNK_BYTES):
            chunk = bytes(view[offset : offset + STDIN_CHUNK_BYTES])
            if not await self._envd.send_input(pid, chunk):
                raise PermanentError(f"background process {process_id} has ended: no stdin")

    async def kill(self, process_id: str) -> ProcessInfo:
        """Write ``killed``, kill the supervisor's process group, wait for the end (bounded)."""
        info = await self._process_info(process_id)
        if info.state is not ProcessState.RUNNING:
            return info
        await self._upload(f"{process_directory(process_id)}/killed", b"")
        await kill_tree(self._envd, info.pid, process_id)
        return await self.wait(process_id, timeout=KILL_SECONDS)
