"""The fake envd's processes: real host processes started as envd starts them.

Like envd, the fake starts ``cmd args`` with the sandbox's workspace as the
working directory, gives it a stdin pipe only when asked, reports its pid,
streams stdout and stderr as they come, and ends with the exit status in
Go's words (``exit status 3``, ``signal: killed``). Also like envd it does
**not** kill a process whose stream the client left, and ``SendSignal``
reaches the pid alone: killing the rest of a process tree is the client's
job. A ``Connect-Timeout-Ms`` deadline kills the pid, as envd's does.
``Connect`` (by pid or tag) opens another stream on a running process that
carries the output written from then on: envd keeps no past output.
A process killed because its sandbox was deleted (:meth:`FakeProcess.kill_tree`)
gets no ``end`` event: envd dies with the sandbox, so its stream is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from typing import TypeAlias

import attrs

__all__ = ["CHUNK_BYTES", "FakeProcess", "Listener", "go_status"]

CHUNK_BYTES = 32 * 1024
"""Bytes per read of a process's output (one ``data`` event at most this large)."""
_QUEUE_EVENTS = 8
"""Output events waiting for the stream writer; a slow client holds the process back."""

_GO_SIGNAL_NAMES = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGABRT: "aborted",
    signal.SIGKILL: "killed",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGUSR2: "user defined signal 2",
}


def go_status(returncode: int) -> dict[str, object]:
    """The ``end`` event of a process that ended with ``returncode`` (proto3 JSON: no zeros)."""
    if returncode >= 0:
        end: dict[str, object] = {"exited": True, "status": f"exit status {returncode}"}
        if returncode:
            end["exitCode"] = returncode
        return end
    number = -returncode
    try:
        name = _GO_SIGNAL_NAMES.get(signal.Signals(number), f"signal {number}")
    except ValueError:
        name = f"signal {number}"
    return {"exitCode": -1, "status": f"signal: {name}", "error": f"signal: {name}"}


Listener: TypeAlias = asyncio.Queue[tuple[str, bytes] | None]
"""One stream's queue of output events (``None`` marks the end of stdout or stderr)."""


@attrs.define(eq=False)
class FakeProcess:
    """One started process and the queues of the streams listening to its output.

    ``Start``'s stream is the first listener; each ``Connect`` adds one that
    gets the output written from then on (envd replays nothing). Output no
    one listens to is read and dropped, as envd does.
    """

    process: asyncio.subprocess.Process
    tag: str | None
    config: Mapping[str, object]
    torn_down: bool = False
    """True once the process was killed with its sandbox: its stream is cut, not ended."""
    _listeners: list[Listener] = attrs.field(factory=list)
    _ended_streams: int = 0
    _readers: list[asyncio.Task[None]] = attrs.field(factory=list)
    first: Listener = attrs.field(init=False)
    """The listener of the ``Start`` stream (subscribed before any output is read)."""

    def __attrs_post_init__(self) -> None:
        self.first = self.listen()

    @property
    def pid(self) -> int:
        """The process id (envd's ``start`` event)."""
        return self.process.pid

    @classmethod
    async def start(
        cls,
        cmd: str,
        args: list[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin: bool,
        tag: str | None,
        config: Mapping[str, object],
    ) -> FakeProcess:
        """Start the process and its output readers."""
        process = await asyncio.create_subprocess_exec(
            cmd,
            *args,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        made = cls(process, tag, config)
        if process.stdout is None or process.stderr is None:  # pragma: no cover - PIPE asked
            raise RuntimeError("the process has no output pipes")
        made._readers = [
            asyncio.ensure_future(made._pump("stdout", process.stdout)),
            asyncio.ensure_future(made._pump("stderr", process.stderr)),
        ]
        return made

    async def _pump(self, name: str, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(CHUNK_BYTES)
            if not chunk:
                break
            for listener in list(self._listeners):
                await listener.put((name, chunk))
        self._ended_streams += 1
        for listener in list(self._listeners):
            await listener.put(None)

    def listen(self) -> Listener:
        """A new listener: the output from now on (and the ends of streams already ended)."""
        listener: Listener = asyncio.Queue(_QUEUE_EVENTS)
        for _ in range(self._ended_streams):
            listener.put_nowait(None)
        self._listeners.append(listener)
        return listener

    def stop_listening(self, listener: Listener) -> None:
        """That stream's client left: its output is dropped from now on (the process runs on)."""
        if listener in self._listeners:
            self._listeners.remove(listener)
        while not listener.empty():
            listener.get_nowait()

    async def wait(self) -> int:
        """Wait for both readers and the process; return its return code."""
        await asyncio.gather(*self._readers, return_exceptions=True)
        return await self.process.wait()

    async def write_stdin(self, data: bytes) -> None:
        """Write ``data`` to the stdin pipe (``BrokenPipeError`` if the reader is gone)."""
        pipe = self.process.stdin
        if pipe is None or pipe.is_closing():
            raise BrokenPipeError("stdin is not open")
        pipe.write(data)
        await pipe.drain()

    def close_stdin(self) -> None:
        """Close the stdin pipe (end of file for the process)."""
        if self.process.stdin is not None:
            self.process.stdin.close()

    def signal(self, number: int) -> None:
        """Send ``number`` to the pid alone, as envd does."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(number)

    def kill_tree(self) -> None:
        """Kill the process and, if it leads one, its process group (the sandbox is deleted)."""
        self.torn_down = True
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        self.signal(signal.SIGKILL)
