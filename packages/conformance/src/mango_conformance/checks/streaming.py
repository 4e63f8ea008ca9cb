"""Streaming checks: ``exec_stream`` is ``exec`` delivered as it happens.

For each scenario the same command runs through ``exec`` and through
``exec_stream``; the joined chunks and the final result must equal the
buffered result byte for byte and flag for flag. The stream's own shape is
checked on the way (chunks, then exactly one result with no output bytes).
Early delivery is detected with an event, not a clock: the command waits for
a file that the check writes only once the first chunk has arrived.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio

import attrs
import pytest

from mango.provider import Command, ExecResult, OutputChunk, OutputStream, Quirk, Sandbox
from mango.provider.output import ExecChannel, collect
from mango_conformance.checks import assert_same_bytes, mark_checks
from mango_conformance.harness import Harness
from mango_conformance.scripts import (
    FLOOD,
    FLOOD_CHUNK,
    PROCESS_TREE,
    describe_pid,
    flood_expected,
    wait_for_file,
    wait_until_gone,
)

__all__ = ["FLOOD_WITH_PROGRESS", "StreamChecks", "assert_slow_consumer_bounded", "stream_result"]

STREAM_TIMEOUT_SECONDS = 1.5
"""The exec timeout of the timed-out scenario (its command would sleep for minutes)."""

GATED = (
    "printf early; printf warn >&2; "
    "while [ ! -e stream.gate ]; do sleep 0.1 2>/dev/null || sleep 1; done; "
    "printf late"
)
"""Print on both streams, wait until ``stream.gate`` exists, print again."""

FLOOD_WITH_PROGRESS = (
    'i=0; while [ "$i" -lt "$1" ]; do head -c 1048576 /dev/zero; i=$((i + 1)); '
    'echo "$i" > progress; done'
)
"""Print ``$1`` MiB on stdout, recording in ``progress`` after each MiB how many were written."""

_MIB = 1024 * 1024


async def stream_result(sandbox: Sandbox, command: Command) -> ExecResult:
    """Run ``command`` through ``exec_stream`` and join it into the buffered result.

    Asserts the stream's shape: only chunks before the end, exactly one final
    :class:`ExecResult` with empty ``stdout``/``stderr``, nothing after it.
    """
    joined = {OutputStream.STDOUT: bytearray(), OutputStream.STDERR: bytearray()}
    final: ExecResult | None = None
    async with sandbox.exec_stream(command) as events:
        async for event in events:
            assert final is None, f"an event came after the final result: {event!r}"
            if isinstance(event, OutputChunk):
                assert event.data, "an empty chunk was delivered"
                joined[event.stream].extend(event.data)
            else:
                assert isinstance(event, ExecResult), f"not an ExecEvent: {event!r}"
                assert event.stdout == b"", "the final result carries stdout bytes"
                assert event.stderr == b"", "the final result carries stderr bytes"
                final = event
    assert final is not None, "the stream ended without a final result"
    return attrs.evolve(
        final,
        stdout=bytes(joined[OutputStream.STDOUT]),
        stderr=bytes(joined[OutputStream.STDERR]),
    )


async def _progress(sandbox: Sandbox) -> int:
    try:
        return int(await sandbox.read_file("progress") or b"0")
    except (FileNotFoundError, ValueError):
        return 0


async def assert_slow_consumer_bounded(sandbox: Sandbox, cap: int, *, polls: int = 60) -> None:
    """On the kit's channel, a consumer that stops reading holds the command back.

    ``cap`` is the sandbox's per-stream cap and should be several MiB above
    the channel's window, so that only backpressure can keep the queue small.
    The command prints twice the cap; while the consumer does not read, the
    channel's queued bytes must stay within the window plus one MiB. The
    check ends when the command reports it has printed everything (which only
    a provider without backpressure reaches) or after ``polls`` looks.
    """
    blocks = 2 * cap // _MIB
    command = Command(("sh", "-c", FLOOD_WITH_PROGRESS, "sh", str(blocks)), timeout=120)
    async with sandbox.exec_stream(command) as events:
        assert isinstance(events, ExecChannel), "the stream is not the kit's ExecChannel"
        first = await anext(events)
        assert isinstance(first, OutputChunk), f"expected output first, got {first!r}"
        for _ in range(polls):
            queued = events.queued_bytes
            assert queued <= events.window + _MIB, f"{queued} bytes queued for a slow reader"
            if await _progress(sandbox) >= blocks:
                break
            await asyncio.sleep(0.05)
        rest = await collect(events)
    assert len(first.data) + len(rest.stdout) == cap
    assert rest.stdout_truncated
    assert rest.exit_code == 0


def _assert_parity(buffered: ExecResult, streamed: ExecResult) -> None:
    for field in ("exit_code", "timed_out", "cancelled", "stdout_truncated", "stderr_truncated"):
        assert getattr(streamed, field) == getattr(buffered, field), (
            f"{field}: stream {getattr(streamed, field)!r}, exec {getattr(buffered, field)!r}"
        )
    for name in ("stdout", "stderr"):
        mine, theirs = getattr(streamed, name), getattr(buffered, name)
        assert_same_bytes(mine, theirs, f"{name}: the stream against exec")


class StreamChecks:
    """``exec_stream`` against ``exec``: same bytes, same flags, delivered as they come."""

    def _both(self, conformance: Harness, command: Command, *, fresh: bool = False) -> ExecResult:
        """Run ``command`` buffered and streamed, assert parity, return the buffered result."""
        sandbox = conformance.create()
        buffered = conformance.run(sandbox.exec(command), "buffered exec")
        if fresh:
            sandbox = conformance.create()
        streamed = conformance.run(stream_result(sandbox, command), "streamed exec")
        _assert_parity(buffered, streamed)
        return buffered

    def test_stream_parity_plain_output(self, conformance: Harness) -> None:
        """Output on both streams arrives the same through exec_stream as through exec."""
        result = self._both(conformance, conformance.command("printf out; printf err >&2"))
        assert (result.stdout, result.stderr, result.exit_code) == (b"out", b"err", 0)

    def test_stream_parity_non_zero_exit(self, conformance: Harness) -> None:
        """A non-zero exit code is the same in the stream's final result."""
        result = self._both(conformance, conformance.command("printf x; exit 7"))
        assert result.exit_code == 7, f"exit 7 gave exit code {result.exit_code} on both paths"

    def test_stream_parity_past_the_cap(self, conformance: Harness) -> None:
        """Output past the cap: the same exact prefix and truncation flags on both paths."""
        options = conformance.options
        sandbox = conformance.create()
        conformance.run(sandbox.write_file("flood.bin", FLOOD_CHUNK))
        blocks = -(-options.flood_size // (9 + len(FLOOD_CHUNK)))
        command = conformance.command(FLOOD, str(blocks), timeout=max(60.0, options.prompt_seconds))
        buffered = conformance.run(sandbox.exec(command), "buffered flood")
        streamed = conformance.run(stream_result(sandbox, command), "streamed flood")
        _assert_parity(buffered, streamed)
        assert streamed.stdout_truncated
        assert streamed.stderr_truncated
        expected = flood_expected(blocks)[: len(streamed.stdout)]
        assert_same_bytes(streamed.stdout, expected, "streamed stdout (an exact prefix)")

    @pytest.mark.mango_destructive
    def test_stream_parity_timeout(self, conformance: Harness) -> None:
        """A timed-out command: the same output before the timeout, timed_out and exit -1."""
        command = conformance.command(
            "printf before; printf e >&2; sleep 300", timeout=STREAM_TIMEOUT_SECONDS
        )
        result = self._both(
            conformance, command, fresh=conformance.options.has_quirk(Quirk.TIMEOUT_ENDS_SANDBOX)
        )
        assert result.timed_out
        assert result.exit_code == -1

    def test_stream_parity_stdin_echo(self, conformance: Harness) -> None:
        """stdin echoed by cat comes back the same, byte for byte, on both paths."""
        payload = bytes(range(256)) * 16 + b"\x00tail\n"
        result = self._both(conformance, Command(argv=("cat",), stdin=payload))
        assert result.stdout == payload

    def test_stream_delivers_output_before_the_command_ends(self, conformance: Harness) -> None:
        """Chunks printed before a wait arrive while the command still waits for us.

        Under ``output-at-end`` the relaxed form: the whole output and the result arrive.
        """
        sandbox = conformance.create()
        command = conformance.command(GATED, timeout=max(30.0, conformance.options.prompt_seconds))
        if conformance.options.has_quirk(Quirk.OUTPUT_AT_END):
            # The relaxed clause: output may arrive only at the end, so the gate
            # is open from the start; the stream must still carry all of it, then
            # the result.
            async def at_end() -> ExecResult:
                await sandbox.write_file("stream.gate", b"")
                async with sandbox.exec_stream(command) as events:
                    return await collect(events)

            result = conformance.run(at_end(), "gated stream, output at the end")
            assert not result.timed_out, "the command never saw the gate"
            assert (result.stdout, result.stderr, result.exit_code) == (b"earlylate", b"warn", 0)
            return

        async def scenario() -> tuple[bytes, ExecResult]:
            seen = b""
            async with sandbox.exec_stream(command) as events:
                async for event in events:
                    if isinstance(event, ExecResult):
                        return seen, event
                    if event.stream is OutputStream.STDOUT:
                        seen += event.data
                        if seen == b"early":
                            # Only now may the command go on: the chunk came first.
                            await sandbox.write_file("stream.gate", b"")
            raise AssertionError("the stream ended without a final result")

        seen, result = conformance.run(scenario(), "gated stream")
        assert not result.timed_out, (
            f"the command waited for the gate until its timeout: {seen!r} had arrived, "
            "so output is not delivered before the command ends"
        )
        assert (seen, result.exit_code) == (b"earlylate", 0)

    def test_leaving_the_stream_early_kills_the_tree(self, conformance: Harness) -> None:
        """Leaving the async with before the result kills the command's processes."""
        options = conformance.options
        sandbox = conformance.create()
        command = conformance.command(PROCESS_TREE, "leave")

        async def scenario() -> bool:
            async with sandbox.exec_stream(command):
                return await wait_for_file(sandbox, "leave.ready", options.prompt_seconds)

        assert conformance.run(scenario(), "left stream"), "the command never started"
        for role in ("leader", "child"):
            gone = conformance.run(
                wait_until_gone(sandbox, options.shell, f"leave.{role}", options.prompt_seconds)
            )
            assert gone, f"the {role} process outlived leaving the stream: " + conformance.run(
                describe_pid(sandbox, options.shell, f"leave.{role}")
            )


mark_checks(StreamChecks, pytest.mark.mango_stream)
