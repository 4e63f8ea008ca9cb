"""What every provider's exec shares: timeout rule, cancellation checkpoint, tracking, streaming.

* :func:`effective_timeout`: ``command.timeout``, else ``spec.timeout``;
  infinity means none; NaN is rejected naming the field it came from.
* :func:`checkpoint`: raise :class:`asyncio.CancelledError` before any side
  effect if the task is already being cancelled.
* :class:`ExecTracker` / :class:`ExecHandle`: the commands running per
  sandbox, so that destroy can kill them (through a kill action the provider
  gives each handle) and wait until their execs have returned.
* :func:`open_exec_stream`: runs a provider's producer coroutine against an
  :class:`~mango.provider.output.ExecChannel` in its own task and hands the
  consumer the channel's events; leaving the ``async with`` early (or
  cancelling the consumer) cancels the producer, whose cancellation path kills
  the process tree, and waits until it has.
* :func:`run_buffered`: ``exec`` as the buffered form of the same producer:
  it runs in the calling task (no second task, no hand-off per chunk) and
  :func:`~mango.provider.output.collect` reads the channel afterwards.
* :func:`torn_down`: after a command ended the way a teardown ends it
  (killed, its stream cut, its sandbox not found), whether its sandbox was
  destroyed, maybe by another process: then the result is ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager

import attrs

from mango.domain.errors import InvalidInput, MangoError, SandboxNotFound
from mango.domain.values import Command, ExecEvent, ExecResult, SandboxSpec
from mango.provider.output import DEFAULT_WINDOW_BYTES, ExecChannel, collect
from mango.provider.tasks import cancel_and_settle

__all__ = [
    "TEARDOWN_SETTLE_SECONDS",
    "ExecHandle",
    "ExecProducer",
    "ExecTracker",
    "StreamedExec",
    "check_command",
    "checkpoint",
    "effective_timeout",
    "open_exec_stream",
    "run_buffered",
    "torn_down",
]

_LOG = logging.getLogger(__name__)

ExecProducer = Callable[[ExecChannel], Awaitable[ExecResult]]
"""A provider's exec body: feeds the channel, returns the final result (from ``channel.result``).

Cancelling it must kill the command's process tree before it re-raises.
"""


async def checkpoint() -> None:
    """Raise :class:`asyncio.CancelledError` now if the current task is being cancelled.

    Called before any side effect, so a task cancelled before the call runs
    nothing (a thread started by :func:`asyncio.to_thread` would run to the end).
    """
    await asyncio.sleep(0)


TEARDOWN_SETTLE_SECONDS = 2.0
"""How long :func:`torn_down` keeps asking about a sandbox that still looks alive."""


async def torn_down(
    is_torn_down: Callable[[], Awaitable[bool]], *, settle: float = TEARDOWN_SETTLE_SECONDS
) -> bool:
    """True if the command's sandbox was torn down while it ran: a destroy, maybe elsewhere.

    Call it when a command ended the way a teardown ends one (killed by a
    signal, its stream cut, its sandbox not found) and the destroy was not
    this client's own (:attr:`ExecHandle.destroyed` covers those): another
    worker or ``mango sessions delete`` may have destroyed the sandbox. Then
    the exec returns ``cancelled=True`` with exit code -1, as for a destroy
    in this process, rather than a bare exit code or an error.

    ``is_torn_down`` asks the backend once (True: gone or being removed). A
    backend may report the command's end a moment before the sandbox's, so a
    sandbox still shown alive is asked again, backing off, for up to
    ``settle`` seconds before the end is taken as the command's own (an OOM
    kill, ``kill -9``). A probe that raises :class:`SandboxNotFound` answers
    True (the sandbox is gone); any other :class:`MangoError` (an outage,
    refused credentials) answers False: the caller's own result or error
    stands.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    delay = 0.01
    while True:
        try:
            if await is_torn_down():
                return True
        except SandboxNotFound:
            return True
        except MangoError as exc:
            _LOG.debug("could not ask whether the sandbox was torn down: %s", exc)
            return False
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)


def effective_timeout(command: Command, spec: SandboxSpec) -> float | None:
    """Seconds the command may run: ``command.timeout``, else ``spec.timeout``; ``None`` for none.

    Infinity means no timeout. Raises :class:`InvalidInput` naming the field
    for NaN (the value objects accept it; a NaN deadline would corrupt an
    event loop's timer heap).
    """
    field, timeout = (
        ("command.timeout", command.timeout)
        if command.timeout is not None
        else ("spec.timeout", spec.timeout)
    )
    if timeout is None or math.isinf(timeout):
        return None
    if math.isnan(timeout):
        raise InvalidInput(f"{field} must be a positive number, got nan")
    return float(timeout)


@attrs.define(eq=False)
class ExecHandle:
    """One command of a sandbox, as :class:`ExecTracker` sees it."""

    destroyed: bool = False
    """Set when the sandbox was destroyed while the command was pending or running."""
    kill_requested: asyncio.Event = attrs.field(factory=asyncio.Event)
    """Set by :meth:`destroy`; the exec's supervisor stops waiting for the command."""
    finished: asyncio.Event = attrs.field(factory=asyncio.Event)
    """Set when the exec has returned (:meth:`ExecTracker.unregister`)."""
    _kill: Callable[[], None] | None = attrs.field(default=None, alias="_kill")

    def set_kill(self, action: Callable[[], None]) -> None:
        """Give the synchronous action that kills the started command; runs now if destroyed."""
        self._kill = action
        if self.destroyed:
            action()

    def destroy(self) -> None:
        """Kill the command now (if it has a kill action) and tell its exec to finish up."""
        self.destroyed = True
        if self._kill is not None:
            self._kill()
        self.kill_requested.set()


@attrs.define
class ExecTracker:
    """The commands running per sandbox key, so that destroy can terminate them.

    It covers commands started through one provider instance.
    """

    _runs: dict[str, set[ExecHandle]] = attrs.field(factory=dict, init=False)

    def register(self, key: str) -> ExecHandle:
        """Track a new command of sandbox ``key``."""
        handle = ExecHandle()
        self._runs.setdefault(key, set()).add(handle)
        return handle

    def unregister(self, key: str, handle: ExecHandle) -> None:
        """Forget a command that has finished, and wake whoever waits for it."""
        runs = self._runs.get(key)
        if runs is not None:
            runs.discard(handle)
            if not runs:
                del self._runs[key]
        handle.finished.set()

    @contextlib.contextmanager
    def track(self, key: str) -> Iterator[ExecHandle]:
        """``register`` on entry, ``unregister`` on exit."""
        handle = self.register(key)
        try:
            yield handle
        finally:
            self.unregister(key, handle)

    def mark_destroyed(self, key: str) -> list[ExecHandle]:
        """Destroy every running command of sandbox ``key`` now; return their handles."""
        handles = list(self._runs.get(key, ()))
        for handle in handles:
            handle.destroy()
        return handles

    async def terminate(self, key: str, timeout: float) -> None:
        """Kill every command of sandbox ``key`` and wait (bounded) until their execs return."""
        handles = self.mark_destroyed(key)
        if not handles:
            return
        waiters = [asyncio.ensure_future(handle.finished.wait()) for handle in handles]
        try:
            await asyncio.wait(waiters, timeout=timeout)
        finally:
            for waiter in waiters:
                waiter.cancel()


async def _produce(producer: ExecProducer, channel: ExecChannel) -> None:
    try:
        result = await producer(channel)
    except BaseException as exc:
        # Handed to the consumer, which raises it; a cancellation is re-raised here too.
        channel.fail(exc)
        if not isinstance(exc, Exception):
            raise
    else:
        channel.finish(result)


@contextlib.asynccontextmanager
async def open_exec_stream(
    producer: ExecProducer, cap: int, *, window: int = DEFAULT_WINDOW_BYTES
) -> AsyncIterator[AsyncIterator[ExecEvent]]:
    """Run ``producer`` in a task and yield its events (the body of ``Sandbox.exec_stream``).

    On leaving the block before the final result, or when the consumer is
    cancelled, the producer is cancelled (its cancellation kills the process
    tree) and awaited, so the command is gone when the block has exited.
    """
    channel = ExecChannel(cap, window=window)
    task = asyncio.ensure_future(_produce(producer, channel))
    try:
        yield channel
    finally:
        channel.abandon()
        await cancel_and_settle(task)  # the producer reports through the channel


async def run_buffered(producer: ExecProducer, cap: int) -> ExecResult:
    """Run ``producer`` in this task and return the buffered result (the body of ``exec``).

    The same producer and :func:`~mango.provider.output.collect` as a stream,
    without the consumer task: nobody reads the channel until the command has
    finished, so its window is unbounded; memory stays O(cap) because nothing
    past the cap is queued. Cancelling the caller cancels the producer
    directly; its errors propagate as they are.
    """
    channel = ExecChannel(cap, window=_UNBOUNDED)
    channel.finish(await producer(channel))
    return await collect(channel)


_UNBOUNDED = 1 << 62


def check_command(command: object) -> None:
    """Raise :class:`InvalidInput` unless ``command`` is a :class:`Command`."""
    if not isinstance(command, Command):
        raise InvalidInput(f"exec() takes a Command, got {type(command).__name__}")


class StreamedExec:
    """Mixin giving a sandbox ``exec`` and ``exec_stream`` from one producer.

    The sandbox class has the attributes ``_spec`` (its :class:`SandboxSpec`)
    and ``_max_output_bytes`` (its per-stream cap; or it overrides
    ``_output_cap()``, as :class:`~mango.provider.remote.RemoteSandbox` does) and defines
    ``_exec_body(command, channel, timeout)``: it runs ``command`` with the
    effective ``timeout`` (seconds or ``None``), feeds the channel and returns
    the final result from ``channel.result(...)``; cancelling it must kill the
    process tree. ``exec`` runs it buffered (:func:`run_buffered`),
    ``exec_stream`` streaming (:func:`open_exec_stream`); both check the
    command first, and a pre-cancelled task runs nothing.
    """

    __slots__ = ()
    _spec: SandboxSpec
    _max_output_bytes: int

    async def _exec_body(
        self, command: Command, channel: ExecChannel, timeout: float | None
    ) -> ExecResult:
        raise NotImplementedError

    def _output_cap(self) -> int:
        """The per-stream cap of this sandbox's commands (default: ``_max_output_bytes``)."""
        return self._max_output_bytes

    async def _produce(self, command: Command, channel: ExecChannel) -> ExecResult:
        await checkpoint()
        return await self._exec_body(command, channel, effective_timeout(command, self._spec))

    async def exec(self, command: Command) -> ExecResult:
        """Run ``command``; return its output and exit code (the buffered :meth:`exec_stream`)."""
        check_command(command)
        # _produce starts with the checkpoint: a task cancelled before this call runs nothing.
        return await run_buffered(
            lambda channel: self._produce(command, channel), self._output_cap()
        )

    def exec_stream(
        self, command: Command
    ) -> AbstractAsyncContextManager[AsyncIterator[ExecEvent]]:
        """Run ``command`` and deliver its output as it arrives, then the final result.

        Leaving the block early or cancelling the consumer kills the command's process tree.
        """
        check_command(command)
        return open_exec_stream(lambda channel: self._produce(command, channel), self._output_cap())
