"""Once-per-step commands (mango.provider.steps) on the local provider, with real processes.

The result is exec's own (bytes, caps, flags, exit code, timeout); a second
call under the same key never runs the command again; a caller SIGKILLed
mid-command (a child Python process: a worker dying) leaves a command that
the next call waits for and collects, or kills at the step's deadline;
cancelling kills it; records of ended steps are removed by the next step,
and a destroy removes them all.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider, LocalSandbox
from mango.provider.steps import StepKey, exec_once

KEY = "session-steps"
CAP = 64
BOUND = 20.0

CHILD = """
import asyncio, sys
from pathlib import Path
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider
from mango.provider.steps import StepKey, exec_once

async def main() -> None:
    provider = LocalProvider(Path(sys.argv[1]), max_output_bytes=int(sys.argv[2]))
    sandbox = await provider.create(sys.argv[3], SandboxSpec())
    command = Command(("sh", "-c", sys.argv[5]), timeout=float(sys.argv[6]) or None)
    await exec_once(sandbox, sandbox.step_records, StepKey(sys.argv[4]), command,
                    timeout=command.timeout)

asyncio.run(main())
"""


def sh(script: str, **options: object) -> Command:
    return Command(("sh", "-c", script), **options)  # type: ignore[arg-type]


@pytest.fixture
async def sandbox(tmp_path: Path) -> LocalSandbox:
    return await LocalProvider(tmp_path, max_output_bytes=CAP).create(KEY, SandboxSpec())


async def until(condition: object, bound: float = BOUND) -> None:
    deadline = time.monotonic() + bound
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def marks(sandbox: LocalSandbox) -> list[bytes]:
    path = Path(sandbox.root) / "marks"
    return path.read_bytes().splitlines() if path.exists() else []


def entries(directory: str) -> list[str] | None:
    """The names in ``directory``, sorted; None if it does not exist."""
    path = Path(directory)
    return sorted(entry.name for entry in path.iterdir()) if path.exists() else None


def step_shells(step: str) -> list[int]:
    """The pids of the step shells of ``step`` (the run's and any retry's), from ``/proc``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mango-step" in argv and step.encode() in argv:
            found.append(int(entry.name))
    return found


def crashed_caller(
    tmp_path: Path, step: str, script: str, timeout: float
) -> subprocess.Popen[bytes]:
    """A child process that runs ``script`` once under ``step``; the test SIGKILLs it."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(CAP), KEY, step, script, str(timeout)]
    )


COMMANDS = [
    sh("echo out; echo err >&2; exit 3"),
    sh("head -c 1000 /dev/zero; printf 0123456789 >&2"),
    Command(("no-such-program",)),
    Command(("cat",), stdin=bytes(range(256)) * 3),
    sh("kill -TERM $$"),
    sh("echo before; sleep 30", timeout=0.5),
    sh('pwd; echo "$A"', env={"A": "b"}, cwd="sub/dir"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=range(len(COMMANDS)))
async def test_the_result_is_execs_own(sandbox: LocalSandbox, command: Command) -> None:
    """Same bytes, caps, truncation flags, exit code and timeout as a direct exec."""
    once = await exec_once(
        sandbox, sandbox.step_records, StepKey("parity"), command, timeout=command.timeout
    )
    assert once == await sandbox.exec(command)


async def test_a_second_call_collects_without_running_again(sandbox: LocalSandbox) -> None:
    command = sh("echo token >> marks; echo done; exit 4")
    records = sandbox.step_records
    first = await exec_once(sandbox, records, StepKey("s", 0), command, timeout=None)
    again = await exec_once(sandbox, records, StepKey("s", 0), command, timeout=None)
    assert first == again
    assert (first.stdout, first.exit_code) == (b"done\n", 4)
    assert marks(sandbox) == [b"token"]
    await exec_once(sandbox, records, StepKey("s", 1), command, timeout=None)
    assert marks(sandbox) == [b"token", b"token"]  # the step's next command is another key


async def test_a_killed_callers_command_is_waited_for_and_collected(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    script = (
        "echo start >> marks; while [ ! -f release ]; do sleep 0.02; done; "
        "echo token >> marks; echo end >> marks; echo collected"
    )
    child = crashed_caller(tmp_path, "crash", script, 0)
    await until(lambda: marks(sandbox) == [b"start"])
    child.send_signal(signal.SIGKILL)
    assert child.wait(BOUND) == -signal.SIGKILL
    retry = asyncio.ensure_future(
        exec_once(sandbox, sandbox.step_records, StepKey("crash"), sh(script), timeout=None)
    )
    await until(lambda: len(step_shells("crash")) == 2)  # the retry waits beside the run
    (Path(sandbox.root) / "release").touch()
    result = await asyncio.wait_for(retry, BOUND)
    assert (result.stdout, result.exit_code) == (b"collected\n", 0)
    assert marks(sandbox) == [b"start", b"token", b"end"]


async def test_a_retry_kills_the_earlier_run_at_the_steps_deadline(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    script = "echo $$ > pid; echo partial; exec sleep 300"
    child = crashed_caller(tmp_path, "late", script, 2.0)
    pid_file = Path(sandbox.root) / "pid"
    await until(lambda: pid_file.exists() and pid_file.read_text().strip())
    child.send_signal(signal.SIGKILL)
    child.wait(BOUND)
    pid = int(pid_file.read_text())
    result = await asyncio.wait_for(
        exec_once(sandbox, sandbox.step_records, StepKey("late"), sh(script), timeout=2.0), BOUND
    )
    assert (result.stdout, result.exit_code, result.timed_out) == (b"partial\n", -1, True)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_cancelling_kills_the_command(sandbox: LocalSandbox) -> None:
    pid_file = Path(sandbox.root) / "pid"
    call = asyncio.ensure_future(
        exec_once(
            sandbox,
            sandbox.step_records,
            StepKey("cancel"),
            sh("echo $$ > pid; exec sleep 300"),
            timeout=None,
        )
    )
    await until(lambda: pid_file.exists() and pid_file.read_text().strip())
    pid = int(pid_file.read_text())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_records_are_bounded_and_go_with_the_sandbox(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    records = sandbox.step_records
    for step in ("one", "two", "three"):
        for index in range(2):
            await exec_once(sandbox, records, StepKey(step, index), sh("true"), timeout=None)
    assert entries(records.directory) == ["three.0", "three.1"]
    assert not Path(records.directory).is_relative_to(sandbox.root)
    await LocalProvider(tmp_path).destroy(KEY, sandbox.ref)
    assert entries(records.directory) is None
