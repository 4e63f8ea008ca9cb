"""The exec half of the provider kit: capped channel, collect, tracker, timeout rule, streams."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import pytest

from mango.provider import (
    Command,
    ConfigurationError,
    ExecEvent,
    ExecResult,
    InvalidInput,
    OutputChunk,
    OutputStream,
    PermanentError,
    ProviderUnavailable,
    SandboxNotFound,
    SandboxSpec,
)
from mango.provider.execution import (
    ExecTracker,
    effective_timeout,
    open_exec_stream,
    run_buffered,
    torn_down,
)
from mango.provider.output import ExecChannel, collect

OUT = OutputStream.STDOUT
ERR = OutputStream.STDERR
KIB = 1024


async def drain(channel: ExecChannel) -> list[object]:
    return [event async for event in channel]


async def spin(rounds: int = 200) -> None:
    """Let every ready task run (no sleeping: each round is one pass of the loop)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_cap_keeps_an_exact_prefix_per_stream() -> None:
    """Each stream keeps its first cap bytes exactly; the rest is dropped and flagged."""
    channel = ExecChannel(5)
    channel.feed(OUT, b"abc")
    channel.feed(ERR, b"12")
    channel.feed(OUT, b"defgh")
    channel.feed(OUT, b"ij")
    channel.finish(channel.result(exit_code=3))
    result = await collect(channel)
    assert result == ExecResult(
        stdout=b"abcde", stderr=b"12", exit_code=3, stdout_truncated=True, stderr_truncated=False
    )


async def test_output_exactly_at_the_cap_is_not_truncated() -> None:
    """Bytes up to the cap are kept without the truncation flag."""
    channel = ExecChannel(4)
    channel.feed(OUT, b"abcd")
    channel.feed(OUT, b"")
    assert not channel.truncated(OUT)
    channel.feed(OUT, b"e")
    assert channel.truncated(OUT)


async def test_zero_cap_keeps_nothing_and_flags_output() -> None:
    """With cap 0 nothing is queued; any output sets the flag."""
    channel = ExecChannel(0)
    channel.feed(ERR, b"x")
    assert channel.queued_bytes == 0
    channel.finish(channel.result(exit_code=0))
    assert await drain(channel) == [ExecResult(stderr_truncated=True)]


async def test_bytes_past_the_cap_are_drained_without_queueing() -> None:
    """Past the cap, feeding never adds to the queue and never asks the producer to wait."""
    channel = ExecChannel(8 * KIB, window=4 * KIB)
    channel.feed(OUT, b"a" * 8 * KIB)
    queued = channel.queued_bytes
    for _ in range(100):
        channel.feed(OUT, b"b" * 64 * KIB)
        await channel.send(OUT, b"c" * 64 * KIB)  # would block forever if it waited
    assert channel.queued_bytes == queued
    assert channel.truncated(OUT)


async def test_streamed_chunks_are_the_kept_parts_in_order() -> None:
    """The consumer sees each chunk's kept part, in feed order, then the final result."""
    channel = ExecChannel(4)
    channel.feed(OUT, b"ab")
    channel.feed(ERR, b"E")
    channel.feed(OUT, b"cdef")
    channel.finish(channel.result(exit_code=0))
    assert await drain(channel) == [
        OutputChunk(OUT, b"ab"),
        OutputChunk(ERR, b"E"),
        OutputChunk(OUT, b"cd"),
        ExecResult(stdout_truncated=True),
    ]


async def test_slow_consumer_keeps_queued_bytes_bounded() -> None:
    """A producer flooding a slow consumer waits: queued bytes never pass window + one chunk."""
    window, chunk, cap = 256 * KIB, 64 * KIB, 4 * 1024 * KIB
    channel = ExecChannel(cap, window=window)

    async def produce() -> ExecResult:
        for _ in range(2 * cap // chunk):
            await channel.send(OUT, b"x" * chunk)
        return channel.result(exit_code=0)

    producer = asyncio.ensure_future(produce())
    producer.add_done_callback(lambda task: channel.finish(task.result()))
    peak = 0
    received = 0
    while True:
        await spin(50)  # the consumer is slow: the producer gets every chance to run ahead
        peak = max(peak, channel.queued_bytes)
        if received < cap - window - chunk:
            assert not producer.done(), "the producer ran ahead of the consumer"
        event = await anext(channel)
        if isinstance(event, ExecResult):
            break
        received += len(event.data)
    assert peak <= window + chunk
    assert received == cap
    assert event.stdout_truncated


async def test_callback_producer_pauses_until_there_is_room() -> None:
    """call_when_room fires only once the consumer has taken enough off the queue."""
    channel = ExecChannel(1024 * KIB, window=10)
    channel.feed(OUT, b"0123456789ab")
    assert not channel.has_room
    resumed: list[bool] = []
    channel.call_when_room(lambda: resumed.append(True))
    assert resumed == []
    assert await anext(channel) == OutputChunk(OUT, b"0123456789ab")
    assert resumed == [True]


async def test_abandon_releases_a_waiting_producer_and_drops_later_output() -> None:
    """After the consumer leaves, a blocked send returns and nothing more is queued."""
    channel = ExecChannel(1024, window=4)
    channel.feed(OUT, b"12345")
    blocked = asyncio.ensure_future(channel.send(OUT, b"more"))
    await spin()
    assert not blocked.done()
    channel.abandon()
    await asyncio.wait_for(blocked, 10)
    channel.feed(OUT, b"late")
    assert channel.queued_bytes == 0


async def test_collect_raises_the_producer_error() -> None:
    """fail() ends the stream with the producer's error, after the queued chunks."""
    channel = ExecChannel(10)
    channel.feed(OUT, b"partial")
    channel.fail(InvalidInput("bad cwd"))
    assert await anext(channel) == OutputChunk(OUT, b"partial")
    with pytest.raises(InvalidInput, match="bad cwd"):
        await anext(channel)


async def test_collect_without_a_result_is_a_provider_bug() -> None:
    """A stream that ends without a final result raises PermanentError."""

    async def no_result() -> AsyncIterator[ExecEvent]:
        yield OutputChunk(OUT, b"x")

    with pytest.raises(PermanentError):
        await collect(no_result())


def test_channel_rejects_a_bad_cap() -> None:
    """A negative or non-integer cap is InvalidInput."""
    with pytest.raises(InvalidInput):
        ExecChannel(-1)
    with pytest.raises(InvalidInput):
        ExecChannel(True)


def unchecked(
    command_timeout: float | None, spec_timeout: float | None
) -> tuple[Command, SandboxSpec]:
    """A command and spec built without validators, as a lax deserializer could hand them over."""
    with attrs.validators.disabled():
        return Command(("true",), timeout=command_timeout), SandboxSpec(timeout=spec_timeout)


@pytest.mark.parametrize(
    ("command_timeout", "spec_timeout", "expected"),
    [(2.0, 5.0, 2.0), (None, 5.0, 5.0), (None, None, None), (math.inf, 5.0, None)],
)
def test_effective_timeout(
    command_timeout: float | None, spec_timeout: float | None, expected: float | None
) -> None:
    """command.timeout wins, else spec.timeout; infinity means none."""
    assert effective_timeout(*unchecked(command_timeout, spec_timeout)) == expected


@pytest.mark.parametrize(
    ("command_timeout", "spec_timeout", "field"),
    [(math.nan, None, "command.timeout"), (None, math.nan, "spec.timeout")],
)
def test_nan_timeout_names_its_field(
    command_timeout: float | None, spec_timeout: float | None, field: str
) -> None:
    """NaN is InvalidInput, and the message names where it came from."""
    with pytest.raises(InvalidInput, match=field):
        effective_timeout(*unchecked(command_timeout, spec_timeout))


async def test_tracker_terminate_runs_kill_actions_and_waits() -> None:
    """terminate() kills every command of the key (and only that key) and waits for them."""
    tracker = ExecTracker()
    killed: list[str] = []
    done = asyncio.Event()

    async def command(key: str, name: str) -> None:
        with tracker.track(key) as handle:
            handle.set_kill(lambda: killed.append(name))
            await handle.kill_requested.wait()
        done.set()

    tasks = [
        asyncio.ensure_future(command("a", "a1")),
        asyncio.ensure_future(command("a", "a2")),
        asyncio.ensure_future(command("b", "b1")),
    ]
    await spin()
    await tracker.terminate("a", timeout=10)
    assert sorted(killed) == ["a1", "a2"]
    assert tasks[0].done()
    assert tasks[1].done()
    assert not tasks[2].done()
    tracker.mark_destroyed("b")
    await asyncio.wait_for(tasks[2], 10)


async def test_kill_action_given_after_destroy_runs_at_once() -> None:
    """A command started after destroy marked its handle is killed as soon as it is known."""
    tracker = ExecTracker()
    handle = tracker.register("a")
    tracker.mark_destroyed("a")
    killed: list[bool] = []
    handle.set_kill(lambda: killed.append(True))
    assert killed == [True]
    assert handle.destroyed


async def test_leaving_a_stream_early_cancels_the_producer() -> None:
    """Breaking out of the block cancels the producer and waits for its cleanup."""
    cleaned = asyncio.Event()
    started = asyncio.Event()

    async def producer(channel: ExecChannel) -> ExecResult:
        channel.feed(OUT, b"hello")
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that awaits, like a real kill
            cleaned.set()
        raise AssertionError("unreachable")

    async with open_exec_stream(producer, 100) as events:
        async for event in events:
            assert event == OutputChunk(OUT, b"hello")
            break
    assert started.is_set()
    assert cleaned.is_set()


async def test_cancelling_the_consumer_cancels_the_producer() -> None:
    """A consumer task cancelled while waiting for output takes the producer down with it."""
    cleaned = asyncio.Event()
    waiting = asyncio.Event()

    async def producer(channel: ExecChannel) -> ExecResult:
        try:
            waiting.set()
            await asyncio.Event().wait()
        finally:
            cleaned.set()
        raise AssertionError("unreachable")

    async def consume() -> None:
        async with open_exec_stream(producer, 100) as events:
            async for _ in events:
                pass

    task = asyncio.ensure_future(consume())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


async def test_stream_and_buffered_give_the_same_result() -> None:
    """open_exec_stream + collect and run_buffered agree, errors included."""

    async def producer(channel: ExecChannel) -> ExecResult:
        channel.feed(OUT, b"out" * 10)
        channel.feed(ERR, b"err")
        return channel.result(exit_code=4, timed_out=True)

    async with open_exec_stream(producer, 16) as events:
        streamed = await collect(events)
    assert streamed == await run_buffered(producer, 16)
    assert streamed == ExecResult(
        stdout=(b"out" * 10)[:16],
        stderr=b"err",
        exit_code=4,
        timed_out=True,
        stdout_truncated=True,
    )

    async def failing(channel: ExecChannel) -> ExecResult:
        raise InvalidInput("no such cwd")

    with pytest.raises(InvalidInput):
        await run_buffered(failing, 16)
    with pytest.raises(InvalidInput):
        async with open_exec_stream(failing, 16) as events:
            await collect(events)


async def test_release_window_lets_a_killed_command_drain_up_to_the_cap() -> None:
    """After release_window, sends no longer wait; the cap still bounds what is queued."""
    channel = ExecChannel(10, window=4)
    channel.feed(OUT, b"12345")
    blocked = asyncio.ensure_future(channel.send(OUT, b"678"))
    await spin()
    assert not blocked.done()
    channel.release_window()
    await asyncio.wait_for(blocked, 10)
    await channel.send(OUT, b"9abcdef")
    assert channel.queued_bytes == 10
    assert channel.truncated(OUT)


def _probe(*answers: bool | Exception) -> tuple[list[int], Callable[[], Awaitable[bool]]]:
    """A probe giving ``answers`` in turn (the last one repeats), and its call count."""
    calls = [0]

    async def probe() -> bool:
        answer = answers[min(calls[0], len(answers) - 1)]
        calls[0] += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    return calls, probe


async def test_torn_down_answers_from_the_backend_and_settles() -> None:
    """Gone at once: one ask. Gone after a while: asked until it is. Alive: False after settle."""
    calls, probe = _probe(True)
    assert await torn_down(probe, settle=0.2) is True
    assert calls == [1]
    calls, probe = _probe(False, False, True)
    assert await torn_down(probe, settle=5.0) is True
    assert calls == [3]
    calls, probe = _probe(False)
    assert await torn_down(probe, settle=0.05) is False
    assert calls[0] >= 2


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (SandboxNotFound("gone"), True),
        (ProviderUnavailable("down"), False),
        (ConfigurationError("refused key"), False),
    ],
)
async def test_torn_down_reads_a_failed_probe(error: Exception, expected: bool) -> None:
    """Not found means gone; any other mango error cannot tell, so the command's end stands."""
    calls, probe = _probe(error)
    assert await torn_down(probe, settle=5.0) is expected
    assert calls == [1]
