"""Exec in a Docker sandbox: streams, env, cwd, stdin, caps, timeout and cancellation."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import tracemalloc
from pathlib import Path

import attrs
import pytest

from mango.domain.errors import (
    InvalidInput,
    PathEscapeError,
    PermanentError,
    SandboxNotFound,
    is_permanent,
)
from mango.domain.registry import ProviderContext
from mango.domain.values import Command, SandboxSpec
from mango.provider.output import ExecChannel
from mango_provider_docker import DockerProvider, DockerSandbox, Engine
from mango_provider_docker.execution import SAFE_PATH, _Run
from mango_provider_docker.settings import REGISTRATION

from .conftest import NAMESPACE, RUN_LABELS, docker_host, make_provider
from .helpers import all_gone, eventually, processes, sh, wait_for_file

pytestmark = pytest.mark.docker

TREE = (
    'sleep 300 & printf %s "$!" > "$1.child"; '
    'sh -c \'sleep 301 & printf %s "$!" > "$0.grandchild"; wait\' "$1" & '
    'printf %s "$$" > "$1.leader"; : > "$1.ready"; wait'
)
"""A leader with a child and a grandchild (in a sub-shell), all sleeping; writes their pids."""
TREE_FILES = ("leader", "child", "grandchild")


async def test_exit_code_and_streams_are_kept_apart(sandbox: DockerSandbox) -> None:
    """A non-zero exit is data; stdout and stderr are demultiplexed exactly."""
    result = await sandbox.exec(sh("printf out; printf err >&2; exit 7"))
    assert (result.stdout, result.stderr, result.exit_code) == (b"out", b"err", 7)
    assert not (result.timed_out)
    assert not (result.cancelled)
    assert not (result.stdout_truncated)
    assert not (result.stderr_truncated)


async def test_output_looking_like_the_status_line_is_passed_through(
    sandbox: DockerSandbox,
) -> None:
    """A command printing the wrapper's status prefix gets its bytes back unchanged."""
    result = await sandbox.exec(sh("printf 'mango-exec:1\\nmango-exec-error:x\\n'"))
    assert result.stdout == b"mango-exec:1\nmango-exec-error:x\n"


async def test_non_utf8_arguments_are_refused_not_mangled(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    """The Engine API is JSON: an undecodable byte would become U+FFFD, so it is InvalidInput."""
    marker = "ran-anyway"
    for command in (
        sh(f': > {marker}; printf %s "$1"', os.fsdecode(b"caf\xe9")),
        Command(("sh", "-c", f": > {marker}"), env={"NAME": os.fsdecode(b"\xff")}),
    ):
        with pytest.raises(InvalidInput, match="not valid UTF-8") as caught:
            await sandbox.exec(command)
        assert is_permanent(caught.value)
    assert "argument 4" in str(await _refusal(sandbox, os.fsdecode(b"a\xffb")))
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file(marker)


async def _refusal(sandbox: DockerSandbox, arg: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        await sandbox.exec(sh("true", arg))
    return caught.value


@pytest.mark.parametrize(
    "command",
    [
        # Too large for any exec: refused before anything is sent.
        Command(("true",), env={"BIG": "x" * (10 * 1024 * 1024)}),
        # Small enough to send, too large for the runtime's message (escaped as JSON).
        Command(("true",), env={"BIG": "<" * (1024 * 1024)}),
        # Small enough for the runtime, too large for the kernel (one string > 128 KiB).
        Command(("true",), env={"BIG": "x" * (200 * 1024)}),
    ],
    ids=["10MiB", "runtime-limit", "kernel-limit"],
)
async def test_a_command_too_large_to_start_is_an_error_not_output(
    sandbox: DockerSandbox, command: Command
) -> None:
    """The daemon's or runtime's complaint never comes back as the command's stdout."""
    with pytest.raises(InvalidInput, match="too large") as caught:
        await sandbox.exec(command)
    assert is_permanent(caught.value)
    seen: list[object] = []

    async def consume() -> None:
        async with sandbox.exec_stream(command) as events:
            async for event in events:
                seen.append(event)  # noqa: PERF401 - what arrived before the error counts

    with pytest.raises(InvalidInput, match="too large"):
        await consume()
    assert seen == []
    assert (await sandbox.exec(sh("echo fine"))).stdout == b"fine\n"


async def test_stderr_that_overtakes_the_status_line_is_kept_whole(sandbox: DockerSandbox) -> None:
    """Stderr may arrive before the wrapper's stdout status line: none of it is lost."""
    flood = "head -c 300000 /dev/zero | tr '\\0' e >&2; echo done"
    for _ in range(10):
        result = await sandbox.exec(sh(flood))
        assert (result.exit_code, result.stdout) == (0, b"done\n")
        assert result.stderr == b"e" * 300000


async def test_missing_program_reads_like_local(sandbox: DockerSandbox) -> None:
    """A program that cannot run is 127/126 with the local provider's message, no wrapper lines."""
    expected = {
        ("nosuch",): (127, b"mango: nosuch: command not found\n"),
        ("/no/such/program",): (127, b"mango: /no/such/program: No such file or directory\n"),
        ("/etc/passwd",): (126, b"mango: /etc/passwd: Permission denied\n"),
        ("/workspace",): (126, b"mango: /workspace: Permission denied\n"),
    }
    for argv, (code, stderr) in expected.items():
        result = await sandbox.exec(Command(argv))
        assert (result.exit_code, result.stderr, result.stdout) == (code, stderr, b""), argv
    found = await sandbox.exec(Command(("true",), cwd="sub"))
    assert (found.exit_code, found.stderr) == (0, b"")


async def test_wrapper_variables_never_reach_the_command(sandbox: DockerSandbox) -> None:
    """Variables the wrapper uses internally do not shadow the command's own environment."""
    env = {"p": "x", "f": "y", "d": "z", "c": "w"}
    result = await sandbox.exec(sh('printf "%s|" "$p" "$f" "$d" "$c"', env=env, cwd="a/b"))
    assert result.stdout == b"x|y|z|w|"


async def test_environment_is_fixed_plus_command_env(
    docker_engine: Engine, test_image: str, tmp_path: Path, session_key: str
) -> None:
    """PATH and HOME are fixed, Command.env is added, and the worker's variables stay out.

    The provider is opened by its registration's factory from a context whose
    environment holds its settings and a worker-only variable, before any
    container exists; the test process's own environment (``PYTEST_CURRENT_TEST``
    among it) is there from the start too. A provider that copied either into
    the container, when it creates it or when it runs a command, fails here.
    """
    host = docker_host()
    environ = {
        "MANGO_SANDBOX_IMAGE": test_image,
        "MANGO_SANDBOX_RESOURCE_DIR": str(tmp_path / "resources"),
        "MANGO_SANDBOX_PULL": "0",
        "MANGO_TEST_WORKER_ONLY": "leak",
        **({"DOCKER_HOST": host} if host else {}),
    }
    opened = REGISTRATION.factory(ProviderContext(namespace=NAMESPACE, environ=environ))
    assert isinstance(opened, DockerProvider)
    assert (opened.image, opened.resource_dir) == (test_image, tmp_path / "resources")
    # The same settings, plus the label that lets the session's clean-up find the container.
    provider = attrs.evolve(opened, extra_labels=RUN_LABELS)
    await opened.aclose()
    sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
    try:
        result = await sandbox.exec(Command(("env",), env={"PROBE": "a b=c"}))
    finally:
        await sandbox.destroy()
        await provider.aclose()
    lines = set(result.stdout.decode().splitlines())
    assert f"PATH={SAFE_PATH}" in lines
    assert "HOME=/workspace" in lines
    assert "PROBE=a b=c" in lines
    assert not any("MANGO_TEST_WORKER_ONLY" in line for line in lines)
    assert "PYTEST_CURRENT_TEST" in os.environ  # so the next line can fail
    # Beyond those: the Engine's HOSTNAME, and PWD and SHLVL of the wrapper's shell.
    names = {line.partition("=")[0] for line in lines}
    assert names == {"PATH", "HOME", "PROBE", "HOSTNAME", "PWD", "SHLVL"}


async def test_cwd_is_created_below_the_workspace(sandbox: DockerSandbox) -> None:
    """A missing working directory is created, relative to /workspace."""
    result = await sandbox.exec(Command(("pwd",), cwd="made/on/demand"))
    assert result.stdout == b"/workspace/made/on/demand\n"
    listing = await sandbox.exec(sh("stat -c %a made/on/demand"))
    assert listing.stdout == b"755\n"


async def test_cwd_through_a_symlink_is_an_escape(sandbox: DockerSandbox) -> None:
    """A symlink in the working directory raises PathEscapeError and runs nothing."""
    await sandbox.exec(sh("mkdir -p real && ln -s /etc link && ln -s real inside && : > file"))
    for cwd in ("link", "inside", "link/sub"):
        with pytest.raises(PathEscapeError):
            await sandbox.exec(Command(("touch", "/workspace/ran"), cwd=cwd))
    with pytest.raises(PermanentError):
        await sandbox.exec(Command(("touch", "/workspace/ran"), cwd="file/below"))
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("ran")


async def test_stdin_is_binary_exact_and_closed(sandbox: DockerSandbox) -> None:
    """Stdin bytes arrive unchanged (NUL and high bytes) and end with end-of-file."""
    payload = bytes(range(256)) * 257 + b"\x00tail"
    result = await sandbox.exec(Command(("cat",), stdin=payload))
    assert result.stdout == payload
    big = os.urandom(3 * 1024 * 1024)
    digest = await sandbox.exec(sh("sha256sum | cut -d' ' -f1", stdin=big))
    assert digest.stdout.decode().strip() == hashlib.sha256(big).hexdigest()


@pytest.mark.parametrize(
    "script", ["echo done; exit 3", "head -c 5 >/dev/null; echo done; exit 3"], ids=["none", "some"]
)
async def test_a_command_that_leaves_its_stdin_unread_ends_when_it_exits(
    sandbox: DockerSandbox, script: str
) -> None:
    """Megabytes of stdin the command never reads do not hold its result back.

    The Engine stops reading stdin once the command is gone; the result must
    not wait for the unsent rest (it did, for a minute or more: a command
    given a timeout was reported as timed out).
    """
    unread = os.urandom(8 * 1024 * 1024)
    result = await sandbox.exec(sh(script, stdin=unread, timeout=30.0))
    assert (result.stdout, result.exit_code, result.timed_out) == (b"done\n", 3, False)
    # The next command on the same container is not held up either.
    again = await sandbox.exec(sh("cat >/dev/null; echo read", stdin=unread, timeout=30.0))
    assert (again.stdout, again.exit_code, again.timed_out) == (b"read\n", 0, False)


async def test_an_exec_not_yet_started_has_not_exited(
    sandbox: DockerSandbox, docker_engine: Engine
) -> None:
    """Not running and no exit code is an exec the daemon has yet to start, not an exit.

    The Engine answers the start request before it starts the process; taking
    that moment for an exit closed the stream under a command with megabytes of
    stdin still to send, and the daemon reported 126 with no output (CI, once).
    """
    execution = await docker_engine.exec_create(
        sandbox.container_id, ["true"], env=[], stdin=False, workdir="/"
    )
    assert execution is not None
    run = _Run(docker_engine, sandbox.container_id, execution, ExecChannel(1024), set())
    waiting = asyncio.ensure_future(run.wait_exited(max_delay=0.05))
    try:
        done, _ = await asyncio.wait({waiting}, timeout=1.0)
        assert not done, f"an exec never started was taken as exited: {waiting.result()}"
        await docker_engine.exec_start_detached(execution)
        info = await asyncio.wait_for(waiting, timeout=30.0)
    finally:
        waiting.cancel()
    assert info is not None
    assert (info["Running"], info["ExitCode"]) == (False, 0)


async def test_without_stdin_the_command_reads_end_of_file(sandbox: DockerSandbox) -> None:
    """No stdin means an immediate end-of-file, not a hang."""
    result = await sandbox.exec(Command(("cat",), timeout=20.0))
    assert (result.stdout, result.exit_code, result.timed_out) == (b"", 0, False)


async def test_output_is_capped_per_stream_with_an_exact_prefix(
    docker_engine: Engine, test_image: str, resource_dir: Path, session_key: str
) -> None:
    """Each stream keeps exactly the first ``cap`` bytes and is flagged; short output is not."""
    provider = make_provider(resource_dir, test_image, max_output_bytes=1000)
    try:
        sandbox = await provider.create(session_key, SandboxSpec())
        try:
            result = await sandbox.exec(
                sh("seq 1 30000; seq 30001 60000 >&2; printf short > /dev/null")
            )
            out = "".join(f"{n}\n" for n in range(1, 30001)).encode()
            err = "".join(f"{n}\n" for n in range(30001, 60001)).encode()
            assert (result.stdout, result.stderr) == (out[:1000], err[:1000])
            assert result.stdout_truncated
            assert result.stderr_truncated
            assert result.exit_code == 0
            exact = await sandbox.exec(sh("head -c 1000 /dev/zero"))
            assert len(exact.stdout) == 1000
            assert not exact.stdout_truncated
        finally:
            await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_output_memory_stays_bounded(
    docker_engine: Engine, test_image: str, resource_dir: Path, session_key: str
) -> None:
    """Printing 32 MiB per stream past a 4 KiB cap allocates a small, bounded amount."""
    provider = make_provider(resource_dir, test_image, max_output_bytes=4096)
    try:
        sandbox = await provider.create(session_key, SandboxSpec())
        try:
            tracemalloc.start()
            try:
                result = await sandbox.exec(
                    sh("head -c 33554432 /dev/zero & head -c 33554432 /dev/zero >&2; wait")
                )
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert result.exit_code == 0
            assert result.stdout == bytes(4096)
            assert result.stderr == bytes(4096)
            assert peak < 4 * 1024 * 1024, f"peak {peak} bytes while 64 MiB streamed"
        finally:
            await sandbox.destroy()
    finally:
        await provider.aclose()


async def test_timeout_kills_only_the_command_tree(
    sandbox: DockerSandbox, docker_engine: Engine
) -> None:
    """A timeout returns promptly, kills the whole tree, and leaves the container usable."""
    started = time.monotonic()
    result = await sandbox.exec(sh(TREE, "t", timeout=1.5))
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code == -1
    assert not result.cancelled
    assert elapsed < 1.5 + 5.0
    await wait_for_file(sandbox, "t.ready", 0)
    files = [f"t.{role}" for role in TREE_FILES]
    await eventually(lambda: all_gone(sandbox, *files), 10.0, "the timed-out tree dying")
    inspect = await docker_engine.inspect_container(sandbox.container_id)
    assert inspect is not None
    assert inspect["State"]["Running"]
    after = await sandbox.exec(sh("printf usable"))
    assert after.stdout == b"usable"


async def test_cancellation_kills_the_tree_and_re_raises(sandbox: DockerSandbox) -> None:
    """Cancelling a running exec re-raises CancelledError promptly; its processes die."""
    task = asyncio.ensure_future(sandbox.exec(sh(TREE, "c")))
    await wait_for_file(sandbox, "c.ready")
    begun = time.monotonic()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10.0)
    assert task in done
    assert task.cancelled()
    assert time.monotonic() - begun < 10.0
    files = [f"c.{role}" for role in TREE_FILES]
    await eventually(lambda: all_gone(sandbox, *files), 10.0, "the cancelled tree dying")
    assert (await sandbox.exec(sh("printf usable"))).stdout == b"usable"


async def test_early_timeouts_and_cancels_leave_nothing_running(sandbox: DockerSandbox) -> None:
    """Whatever phase a timeout or a cancel lands in, no command survives it."""
    for timeout in (0.001, 0.01, 0.03, 0.06, 0.1, 0.2):
        result = await sandbox.exec(Command(("sleep", "321"), timeout=timeout))
        assert result.timed_out, (timeout, result)
    for steps in (0, 1, 2, 3, 5, 8, 13, 21, 34, 55):
        task = asyncio.ensure_future(sandbox.exec(Command(("sleep", "322"))))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait({task}, timeout=30.0)
        assert task.cancelled(), steps

    async def none_left() -> bool:
        return not any(" sleep 32" in line for line in await processes(sandbox))

    await eventually(none_left, 20.0, "every sleep 321/322 dying")


async def test_destroy_during_exec_gives_a_cancelled_result(
    provider: DockerProvider, session_key: str
) -> None:
    """Destroying the sandbox under a running command ends it as cancelled, not as an error."""
    sandbox = await provider.create(session_key, SandboxSpec())
    task = asyncio.ensure_future(sandbox.exec(sh(": > up; sleep 300")))
    await wait_for_file(sandbox, "up")
    await sandbox.destroy()
    result = await asyncio.wait_for(task, 30.0)
    assert result.cancelled
    assert result.exit_code == -1
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(sh("true"))


async def test_exec_starts_a_stopped_container_again(
    sandbox: DockerSandbox, docker_engine: Engine
) -> None:
    """A container stopped behind mango's back is started again by the next exec."""
    await sandbox.write_file("kept.txt", b"kept")
    docker = await docker_engine.client()
    await docker.containers.container(sandbox.container_id).stop(t=0)
    result = await sandbox.exec(sh("cat kept.txt"))
    assert result.stdout == b"kept"
