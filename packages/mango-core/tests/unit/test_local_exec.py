"""Exec on the local provider: results, environment, timeouts, cancellation, caps."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mango.domain.errors import InvalidInput, PathEscapeError
from mango.domain.values import Command, ExecResult, SandboxSpec
from mango.local import LocalProvider, LocalSandbox, execution
from mango.local.execution import SAFE_PATH

MIB = 1024 * 1024
# Generous upper bound on any one test command: a hang fails instead of stalling CI.
BOUND = 60.0


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "sandboxes"
    # Whatever a failing test left running below tmp_path is ours to stop.
    for pid in processes_under(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def processes_under(directory: Path) -> list[int]:
    """Pids of processes whose cwd is below ``directory`` (deleted or not)."""
    prefix = str(directory.resolve()) + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = str((entry / "cwd").readlink())
        except OSError:
            continue
        if cwd.startswith(prefix):
            found.append(int(entry.name))
    return found


@pytest.fixture
async def sandbox(base: Path) -> LocalSandbox:
    return await LocalProvider(base).create("exec-session", SandboxSpec())


def sh(script: str, **kwargs: object) -> Command:
    return Command(("sh", "-c", script), **kwargs)  # type: ignore[arg-type]


def gone(path: str) -> bool:
    """True if nothing, not even a dangling link, exists at ``path``."""
    return not os.path.lexists(path)


def process_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a zombie has already died)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # Field 3, after the parenthesised command name, is the state.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_for_pid_file(sandbox: LocalSandbox, name: str) -> int:
    """Poll (bounded) until the command has written a complete pid line to ``name``."""
    path = Path(sandbox.root) / name
    for _ in range(int(BOUND * 100)):
        if path.exists():
            text = path.read_text()
            if text.endswith("\n"):
                return int(text)
        await asyncio.sleep(0.01)
    pytest.fail(f"the command never wrote {name}")


async def wait_until_dead(pid: int) -> None:
    """Poll (bounded) until ``pid`` is gone; killed processes may take a moment to exit."""
    for _ in range(1000):
        if not process_alive(pid):
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"process {pid} is still alive")


async def test_exit_code_and_exact_output(sandbox: LocalSandbox) -> None:
    """Exit code, stdout and stderr come back exactly, binary included."""
    result = await sandbox.exec(sh(r"printf 'out\000put'; printf 'err\n' >&2; exit 3"))
    assert result == ExecResult(stdout=b"out\x00put", stderr=b"err\n", exit_code=3)
    assert not result.ok


async def test_success_is_ok(sandbox: LocalSandbox) -> None:
    """A command exiting 0 gives an ok result with nothing truncated."""
    result = await sandbox.exec(Command(("echo", "hello", "world")))
    assert result == ExecResult(stdout=b"hello world\n")
    assert result.ok


async def test_argv_is_not_shell_interpreted(sandbox: LocalSandbox) -> None:
    """Arguments reach the program verbatim: no globbing, no expansion."""
    result = await sandbox.exec(Command(("printf", "%s|", "$HOME", "*", "a b")))
    assert result.stdout == b"$HOME|*|a b|"


async def test_exit_by_signal_is_128_plus_signo(sandbox: LocalSandbox) -> None:
    """A command killed by a signal reports 128 + the signal number."""
    result = await sandbox.exec(sh("kill -KILL $$"))
    assert result.exit_code == 128 + signal.SIGKILL
    assert not result.timed_out


async def test_stdin_binary_round_trip(sandbox: LocalSandbox) -> None:
    """Stdin larger than a pipe buffer comes back byte for byte through cat."""
    data = bytes(range(256)) * 4096
    result = await sandbox.exec(Command(("cat",), stdin=data, timeout=BOUND))
    assert result.exit_code == 0
    assert result.stdout == data


async def test_stdin_not_read_does_not_hang(sandbox: LocalSandbox) -> None:
    """A command that ignores a large stdin still finishes normally."""
    result = await sandbox.exec(Command(("true",), stdin=b"x" * (4 * MIB), timeout=BOUND))
    assert result == ExecResult()


async def test_empty_stdin_is_dev_null(sandbox: LocalSandbox) -> None:
    """Without stdin bytes the command reads /dev/null, not the worker's stdin."""
    result = await sandbox.exec(sh("readlink /proc/self/fd/0; cat", timeout=BOUND))
    assert result == ExecResult(stdout=b"/dev/null\n")


async def test_environment_is_cleared(
    sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only PATH, HOME and Command.env reach the command."""
    monkeypatch.setenv("MANGO_TEST_LEAK", "secret")
    result = await sandbox.exec(Command(("env",), env={"GREETING": "hi there"}))
    variables = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    assert variables == {"PATH": SAFE_PATH, "HOME": sandbox.root, "GREETING": "hi there"}


async def test_cwd_defaults_to_root_and_is_created(sandbox: LocalSandbox) -> None:
    """The cwd is the workspace root, or Command.cwd below it (created if absent)."""
    assert (await sandbox.exec(Command(("pwd",)))).stdout == f"{sandbox.root}\n".encode()
    result = await sandbox.exec(Command(("pwd",), cwd="sub/dir"))
    assert result.stdout == f"{sandbox.root}/sub/dir\n".encode()


async def test_cwd_through_planted_symlink_is_refused(sandbox: LocalSandbox) -> None:
    """A cwd that goes through a symlink a command planted is a PathEscapeError."""
    await sandbox.exec(Command(("ln", "-s", "/etc", "leak")))
    with pytest.raises(PathEscapeError):
        await sandbox.exec(Command(("pwd",), cwd="leak"))
    with pytest.raises(PathEscapeError):
        await sandbox.exec(Command(("pwd",), cwd="leak/ssl"))


_RENAME_EXCHANGE = 2


def exchange(first: Path, second: Path) -> None:
    """Atomically swap two names (``renameat2(RENAME_EXCHANGE)``): one always exists at each."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(
        at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), _RENAME_EXCHANGE
    ):
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), str(first))


@pytest.mark.parametrize("cwd", ["sub", ""], ids=["sub-directory", "root"])
async def test_cwd_swapped_for_a_symlink_mid_flight_never_escapes(
    sandbox: LocalSandbox, tmp_path: Path, cwd: str
) -> None:
    """A directory swapped for a symlink while execs start: none runs outside the workspace.

    A thread swaps the cwd (or the workspace itself) with a symlink to an
    outside directory as fast as it can. Each exec either refuses the link
    (PathEscapeError) or runs in the real directory; with a check by path and a
    start by path, a few in every 300 used to run outside.
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    root = Path(sandbox.root)
    (root / "sub").mkdir()
    target = root / cwd if cwd else root
    link = target.with_name(target.name + ".link")
    link.symlink_to(outside)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            exchange(target, link)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    escaped, ran, refused = [], 0, 0
    try:
        # Until 200 commands ran (a refused one proves nothing), bounded.
        for _ in range(3000):
            if ran >= 200:
                break
            try:
                result = await sandbox.exec(Command(("pwd", "-P"), cwd=cwd))
            except PathEscapeError:
                refused += 1
                continue
            ran += 1
            where = result.stdout.decode().strip()
            if not where.startswith(str(root.parent.resolve())):
                escaped.append(where)
    finally:
        stop.set()
        swapper.join(BOUND)
    if link.is_dir() and not link.is_symlink():
        exchange(target, link)  # leave the real directory in place
    assert escaped == [], f"{len(escaped)} of {ran} commands ran outside: {escaped[:3]}"
    assert ran > 0, f"every one of {refused} execs was refused; the race was never run"


NON_DUMPABLE_WORKER = """
import asyncio, ctypes, sys
from pathlib import Path

libc = ctypes.CDLL(None, use_errno=True)


class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class Data(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


# Without CAP_SYS_PTRACE and non-dumpable, a child may not read this process's /proc/<pid>/fd.
header, data = Header(0x20080522, 0), (Data * 2)()
assert libc.capget(ctypes.byref(header), data) == 0
data[0].effective &= ~(1 << 19)
data[0].permitted &= ~(1 << 19)
assert libc.capset(ctypes.byref(header), data) == 0
assert libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE 0

from mango.domain import Command, SandboxSpec
from mango.local import LocalProvider
from mango.local import execution


async def main():
    sandbox = await LocalProvider(Path(sys.argv[1])).create("non-dumpable", SandboxSpec())
    for cwd in ("sub", "", "sub"):
        result = await sandbox.exec(Command(("pwd",), cwd=cwd))
        print(result.exit_code, result.stdout.decode().strip(), sandbox.root)
    print(sorted(execution._fd_dirs.values()))


asyncio.run(main())
"""


def test_a_non_dumpable_worker_still_enters_its_cwd(tmp_path: Path) -> None:
    """Children refused the parent's /proc/<pid>/fd enter through their own descriptor copy."""
    result = subprocess.run(
        [sys.executable, "-c", NON_DUMPABLE_WORKER, str(tmp_path)],
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    *runs, fd_dirs = result.stdout.decode().splitlines()
    for line, suffix in zip(runs, ("/sub", "", "/sub"), strict=True):
        code, where, root = line.split()
        assert (code, where) == ("0", root + suffix)
    assert fd_dirs == "['/proc/self/fd']"


async def test_too_large_a_command_is_invalid_input(sandbox: LocalSandbox) -> None:
    """A command line the kernel refuses (E2BIG) is an error, as on every provider, not a result."""
    for command in (
        Command(("true",), env={"BIG": "x" * (200 * 1024)}),
        Command(("true", "x" * (200 * 1024))),
    ):
        with pytest.raises(InvalidInput, match="too large"):
            await sandbox.exec(command)


async def test_missing_program_is_127(sandbox: LocalSandbox) -> None:
    """A program that does not exist gives exit code 127 and a message, not an exception."""
    result = await sandbox.exec(Command(("mango-no-such-program",)))
    assert result.exit_code == 127
    assert result.stdout == b""
    assert b"mango-no-such-program" in result.stderr
    assert b"not found" in result.stderr


async def test_missing_program_by_path_is_127(sandbox: LocalSandbox) -> None:
    """A relative program path that does not exist is also 127."""
    result = await sandbox.exec(Command(("./nope",)))
    assert result.exit_code == 127
    assert b"./nope" in result.stderr


async def test_non_executable_program_is_126(sandbox: LocalSandbox) -> None:
    """A file without execute permission gives exit code 126, as in a shell."""
    await sandbox.write_file("script.sh", b"#!/bin/sh\necho hi\n")
    result = await sandbox.exec(Command(("./script.sh",)))
    assert result.exit_code == 126
    assert b"./script.sh" in result.stderr


async def test_program_relative_to_cwd(sandbox: LocalSandbox) -> None:
    """A relative program path is looked up from the command's cwd."""
    await sandbox.exec(
        sh("mkdir -p bin && printf '#!/bin/sh\\necho ran\\n' > bin/x; chmod +x bin/x")
    )
    assert (await sandbox.exec(Command(("./x",), cwd="bin"))).stdout == b"ran\n"


async def test_timeout_kills_the_process_group(sandbox: LocalSandbox) -> None:
    """On timeout the shell and its background child both die; output so far is kept."""
    result = await sandbox.exec(
        sh("echo started; echo $$ > shell.pid; sleep 1000 & echo $! > child.pid; wait", timeout=1)
    )
    assert result.timed_out
    assert result.exit_code == -1
    assert result.stdout == b"started\n"
    assert not result.ok
    await wait_until_dead(int(await sandbox.read_file("child.pid")))
    await wait_until_dead(int(await sandbox.read_file("shell.pid")))


async def test_timeout_escalates_to_sigkill(sandbox: LocalSandbox) -> None:
    """Processes that ignore SIGTERM are killed after the grace period."""
    result = await sandbox.exec(
        sh("trap '' TERM; sleep 1000 & echo $! > child.pid; wait; wait", timeout=1)
    )
    assert result.timed_out
    await wait_until_dead(int(await sandbox.read_file("child.pid")))


async def test_spec_timeout_is_the_default(base: Path) -> None:
    """Without Command.timeout the spec's timeout applies; Command.timeout overrides it."""
    provider = LocalProvider(base)
    short = await provider.create("spec-timeout", SandboxSpec(timeout=0.5))
    assert (await short.exec(Command(("sleep", "1000")))).timed_out
    long = await provider.attach("spec-timeout", short.ref, SandboxSpec(timeout=BOUND))
    result = await long.exec(Command(("sleep", "1000"), timeout=0.5))
    assert result.timed_out
    assert (await long.exec(Command(("true",)))) == ExecResult()


def test_non_finite_timeouts_are_refused() -> None:
    """Infinite and NaN timeouts are refused when the command is built."""
    for bad in (float("inf"), float("nan")):
        with pytest.raises(InvalidInput):
            Command(("true",), timeout=bad)


async def test_sandbox_usable_after_timeout(sandbox: LocalSandbox) -> None:
    """A timed-out command leaves the sandbox working."""
    assert (await sandbox.exec(Command(("sleep", "1000"), timeout=0.2))).timed_out
    assert (await sandbox.exec(Command(("echo", "ok")))).stdout == b"ok\n"


async def test_cancellation_kills_the_group_and_reraises(sandbox: LocalSandbox) -> None:
    """Cancelling the awaiting task kills shell and child, then re-raises CancelledError."""
    task = asyncio.create_task(
        sandbox.exec(sh("echo $$ > shell.pid; sleep 1000 & echo $! > child.pid; wait"))
    )
    child = await wait_for_pid_file(sandbox, "child.pid")
    shell = await wait_for_pid_file(sandbox, "shell.pid")
    assert process_alive(child)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The leader is reaped before CancelledError propagates; SIGKILL reached the child.
    assert not process_alive(shell)
    await wait_until_dead(child)


async def test_a_cancellation_while_the_start_settles_kills_the_group(
    sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled after the fork but before the start returned, the command's tree still dies.

    ``create_subprocess_exec`` returns a few loop turns after the fork; a
    starved event loop let a command fork children in between, and a
    cancellation there (asyncio's clean-up kills the leader only) left them
    running. Here the start is held open until the command has forked.
    """
    release = asyncio.Event()
    real_spawn = execution._spawn

    async def slow_spawn(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await real_spawn(*args, **kwargs)
        await release.wait()  # the start has not returned yet: a slow loop, held open
        return process

    monkeypatch.setattr(execution, "_spawn", slow_spawn)
    task = asyncio.create_task(
        sandbox.exec(sh("echo $$ > shell.pid; sleep 1000 & echo $! > child.pid; wait"))
    )
    child = await wait_for_pid_file(sandbox, "child.pid")
    shell = await wait_for_pid_file(sandbox, "shell.pid")
    task.cancel()
    await asyncio.sleep(0)  # the cancellation is delivered while the start is held
    assert not task.done(), "the exec returned before its start settled"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not process_alive(shell)
    await wait_until_dead(child)


async def test_cancelled_task_runs_nothing(sandbox: LocalSandbox) -> None:
    """A task that is already cancelled when it calls exec starts no process."""

    async def cancel_then_exec() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await sandbox.exec(sh("echo ran > marker"))

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(cancel_then_exec())
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("marker")


async def test_destroy_during_exec_cancels_it(base: Path) -> None:
    """Destroy kills a running command, whose result has cancelled=True."""
    provider = LocalProvider(base)
    sandbox = await provider.create("destroy-running", SandboxSpec())
    other = await provider.attach("destroy-running", sandbox.ref, SandboxSpec())
    task = asyncio.create_task(
        sandbox.exec(sh("echo before; sleep 1000 & echo $! > child.pid; wait"))
    )
    child = await wait_for_pid_file(sandbox, "child.pid")
    await other.destroy()
    result = await asyncio.wait_for(task, BOUND)
    assert result.cancelled
    assert result.exit_code == -1
    assert result.stdout == b"before\n"
    assert not result.ok
    await wait_until_dead(child)
    assert gone(sandbox.ref.external_id)


async def test_background_grandchild_holding_pipes_does_not_stall(sandbox: LocalSandbox) -> None:
    """A grandchild that left the group keeps the pipes open; a timeout still returns."""
    script = "setsid sleep 1000 & echo $! > escaped.pid; echo out; wait"
    result = await asyncio.wait_for(sandbox.exec(sh(script, timeout=0.5)), BOUND)
    assert result.timed_out
    assert result.stdout == b"out\n"
    # The escaped process left the group on purpose; the base fixture stops it.
    assert process_alive(int(await sandbox.read_file("escaped.pid")))


async def test_output_capped_per_stream(base: Path) -> None:
    """64 MiB on each stream keeps exactly the cap, an exact prefix, with both flags."""
    sandbox = await LocalProvider(base, max_output_bytes=MIB).create("big", SandboxSpec())
    script = "yes stdout-line | head -c 67108864 & yes e | head -c 67108864 >&2; wait"
    tracemalloc.start()
    try:
        result = await sandbox.exec(sh(script, timeout=BOUND))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.timed_out
    assert result.exit_code == 0
    assert result.stdout == (b"stdout-line\n" * (MIB // 12 + 1))[:MIB]
    assert result.stderr == b"e\n" * (MIB // 2)
    assert result.stdout_truncated
    assert result.stderr_truncated
    # Memory stays O(cap): far below the 128 MiB the command printed.
    assert peak < 16 * MIB


async def test_output_truncation_flag_boundary(base: Path) -> None:
    """Exactly the cap is not truncated; one byte more is, independently per stream."""
    sandbox = await LocalProvider(base, max_output_bytes=10).create("cap", SandboxSpec())
    exact = await sandbox.exec(sh("printf 0123456789; printf abcdefghijk >&2"))
    assert exact.stdout == b"0123456789"
    assert not exact.stdout_truncated
    assert exact.stderr == b"abcdefghij"
    assert exact.stderr_truncated


async def test_concurrent_execs(sandbox: LocalSandbox) -> None:
    """Several commands can run at once in one sandbox."""
    results = await asyncio.gather(*(sandbox.exec(Command(("echo", str(n)))) for n in range(8)))
    assert [r.stdout for r in results] == [f"{n}\n".encode() for n in range(8)]
