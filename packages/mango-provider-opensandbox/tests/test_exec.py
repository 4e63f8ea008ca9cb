"""Exec through execd's event stream: exact bytes, stdin, no stream cut-off, timeouts."""

from __future__ import annotations

from collections.abc import Callable

from mango.provider import Command, OutputChunk, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider
from mango_provider_opensandbox.fake import FakeOpenSandbox, LineSplitter
from mango_provider_opensandbox.wire import FrameDecoder, exit_code_of

SPEC = SandboxSpec(timeout=60)


def sh(script: str, *, stdin: bytes = b"", timeout: float | None = None) -> Command:
    """``sh -c script``."""
    return Command(("sh", "-c", script), stdin=stdin, timeout=timeout)


async def test_newlines_and_binary_output_are_exact(
    make_provider: Callable[..., OpenSandboxProvider],
) -> None:
    """execd strips line terminators; mango's framing gives the exact bytes back."""
    sandbox = await make_provider().create("exact", SPEC)
    result = await sandbox.exec(sh(r"printf 'a\n\nb\r\nc\rd'; printf 'e\n\n' >&2"))
    assert (result.stdout, result.stderr, result.exit_code) == (b"a\n\nb\r\nc\rd", b"e\n\n", 0)
    binary = bytes(range(256)) * 3
    echoed = await sandbox.exec(Command(("cat",), stdin=binary))
    assert echoed.stdout == binary
    assert not echoed.stdout_truncated


async def test_large_stdin_is_staged_and_removed(
    make_provider: Callable[..., OpenSandboxProvider],
) -> None:
    """Stdin too large for the command line travels through the file API, and is gone after."""
    sandbox = await make_provider().create("staged", SPEC)
    data = bytes(range(256)) * 1024  # 256 KiB: past one shell argument
    script = "wc -c; ls /var/lib/mango/stdin | wc -l"
    result = await sandbox.exec(Command(("sh", "-c", script), stdin=data))
    assert result.stdout.split() == [b"262144", b"0"]


async def test_exit_codes_env_and_cwd(make_provider: Callable[..., OpenSandboxProvider]) -> None:
    """Exit codes come from execd's error event; env and cwd reach the command."""
    sandbox = await make_provider().create("codes", SPEC)
    assert (await sandbox.exec(sh("exit 7"))).exit_code == 7
    assert (await sandbox.exec(Command(("no-such-program-here",)))).exit_code == 127
    await sandbox.write_file("sub/dir/marker", b"")
    script = 'printf "%s %s" "$GREETING" "$(pwd)"'
    result = await sandbox.exec(
        Command(("sh", "-c", script), env={"GREETING": "hi there"}, cwd="sub/dir")
    )
    assert result.stdout.startswith(b"hi there /")
    assert result.stdout.endswith(b"/workspace/sub/dir")


async def test_no_fixed_stream_cut_off(make_provider: Callable[..., OpenSandboxProvider]) -> None:
    """A command outlives the request timeout of every other call and still returns its output."""
    provider = make_provider(request_timeout=1.0)
    sandbox = await provider.create("long", SPEC)
    result = await sandbox.exec(sh("echo start; sleep 3; echo end", timeout=30))
    assert (result.stdout, result.exit_code, result.timed_out) == (b"start\nend\n", 0, False)


async def test_streaming_delivers_chunks_then_one_result(
    make_provider: Callable[..., OpenSandboxProvider],
) -> None:
    """exec_stream yields the exact bytes as chunks, then one final result."""
    sandbox = await make_provider().create("stream", SPEC)
    chunks: list[bytes] = []
    async with sandbox.exec_stream(sh("printf 'x\\n'; printf 'y'; exit 3")) as events:
        async for event in events:
            if isinstance(event, OutputChunk):
                chunks.append(event.data)
            else:
                final = event
    assert b"".join(chunks) == b"x\ny"
    assert final.exit_code == 3


async def test_timeout_interrupts_and_keeps_the_sandbox(
    fake: FakeOpenSandbox, make_provider: Callable[..., OpenSandboxProvider]
) -> None:
    """mango's own timer decides; the command is interrupted; the sandbox stays usable."""
    sandbox = await make_provider().create("timeout", SPEC)
    result = await sandbox.exec(sh("sleep 300", timeout=0.5))
    assert (result.timed_out, result.exit_code) == (True, -1)
    assert fake.faults.count(method="DELETE", path=None) >= 1
    assert (await sandbox.exec(sh("echo usable"))).stdout == b"usable\n"


def test_line_splitter_is_execd_tailer() -> None:
    """The fake strips terminators like execd: \\n, \\r, \\r\\n; a blank line is "\\n"."""
    splitter = LineSplitter()
    assert splitter.feed(b"a\n\nb\r\nc\rd") == ["a", "\n", "b", "c"]
    assert splitter.feed(b"\r") == ["d"]
    assert splitter.feed(b"\n") == []  # the second half of \r\n
    assert splitter.feed(b"tail") == []
    assert splitter.flush() == ["tail"]
    assert splitter.feed(b"\xff\n") == ["\ufffd"]


def test_frames_decode_and_exit_codes_parse() -> None:
    """A base64 frame is the chunk; anything else is kept as text with its newline."""
    assert FrameDecoder.decode("AAEC/w==") == b"\x00\x01\x02\xff"
    assert FrameDecoder.decode("sh: base64: not found") == b"sh: base64: not found\n"
    assert FrameDecoder.decode("  ") == b""
    assert exit_code_of({"error": {"evalue": "7"}}) == 7
    assert exit_code_of({"evalue": "-1"}) == -1
    assert exit_code_of({"error": {"evalue": "fork/exec /bin/bash: no such file"}}) is None


async def test_direct_endpoints_never_get_the_api_key(
    fake: FakeOpenSandbox, namespace: str
) -> None:
    """The API key goes to the server (and through its proxy), never to a sandbox's endpoint."""
    for proxy in (False, True):
        provider = OpenSandboxProvider(
            fake.url, api_key=fake.api_key, namespace=namespace, server_proxy=proxy
        )
        try:
            sandbox = await provider.create(f"key-{proxy}", SPEC)
            assert (await sandbox.exec(sh("echo ok"))).stdout == b"ok\n"
            await sandbox.write_file("f", b"x")
        finally:
            await provider.aclose()
    assert fake.direct_api_keys, "the direct data path was not used"
    assert set(fake.direct_api_keys) == {None}
