"""Once-per-step commands in a container (``DockerSandbox.exec_step``, mango.provider.steps).

The result is exec's own (bytes, caps, flags, exit code, timeout, the
exec wrapper's working-directory and program-lookup rules); a second call
under the same key never runs the command again; cancelling kills the
command; ended steps' records are removed by the next step. The crash of a
worker mid-command is ``tests/temporal/test_step_once.py`` in mango-core.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.domain.ports import StepSandbox
from mango.domain.sandbox_ports import StepKey
from mango.domain.values import Command, SandboxSpec
from mango_provider_docker import DockerSandbox
from mango_provider_docker.sandbox import STEPS_ROOT

from .conftest import make_provider

pytestmark = pytest.mark.docker

BOUND = 30.0


def sh(script: str, **options: object) -> Command:
    return Command(("sh", "-c", script), **options)  # type: ignore[arg-type]


@pytest.fixture
async def sandbox(
    test_image: str, resource_dir: Path, session_key: str
) -> AsyncIterator[DockerSandbox]:
    provider = make_provider(resource_dir, test_image, max_output_bytes=64)
    try:
        sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
        try:
            yield sandbox
        finally:
            await provider.destroy(session_key, sandbox.ref)
    finally:
        await provider.aclose()


COMMANDS = [
    sh("echo out; echo err >&2; exit 3"),
    sh("head -c 1000 /dev/zero; printf 0123456789 >&2"),
    Command(("no-such-program",)),
    Command(("cat",), stdin=bytes(range(256)) * 3),
    sh("kill -TERM $$"),
    sh("echo before; sleep 30", timeout=0.5),
    sh('pwd; echo "$A"; env | grep -c SHLVL', env={"A": "b"}, cwd="sub/dir"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=range(len(COMMANDS)))
async def test_the_result_is_execs_own(sandbox: DockerSandbox, command: Command) -> None:
    assert isinstance(sandbox, StepSandbox)
    once = await sandbox.exec_step(StepKey("parity"), command, timeout=command.timeout)
    assert once == await sandbox.exec(command)


async def test_a_second_call_collects_and_records_stay_bounded(sandbox: DockerSandbox) -> None:
    command = sh("echo token >> marks; echo done; exit 4")
    first = await sandbox.exec_step(StepKey("one"), command, timeout=None)
    again = await sandbox.exec_step(StepKey("one"), command, timeout=None)
    assert first == again
    assert (first.stdout, first.exit_code) == (b"done\n", 4)
    await sandbox.exec_step(StepKey("two", 0), sh("true"), timeout=None)
    await sandbox.exec_step(StepKey("two", 1), sh("true"), timeout=None)
    assert (await sandbox.exec(Command(("cat", "marks")))).stdout == b"token\n"
    listed = await sandbox.exec(Command(("ls", STEPS_ROOT)))
    assert listed.stdout.split() == [b"two.0", b"two.1"]


async def test_cancelling_kills_the_command(sandbox: DockerSandbox) -> None:
    call = asyncio.ensure_future(
        sandbox.exec_step(StepKey("cancel"), sh("echo $$ > pid; exec sleep 300"), timeout=None)
    )

    async def pid() -> str:
        return (await sandbox.exec(Command(("cat", "pid")))).stdout.decode().strip()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND
    while not await pid():
        assert loop.time() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    started = await pid()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    alive = await sandbox.exec(Command(("kill", "-0", started)))
    assert alive.exit_code != 0
