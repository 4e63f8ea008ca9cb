"""Small helpers shared by the Docker provider's tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from mango.domain.values import Command, ExecResult
from mango_provider_docker import DockerSandbox

POLL = 0.05

ALIVE = (
    'for f in "$@"; do pid=$(cat "$f") || exit 2; '
    'if kill -0 "$pid" 2>/dev/null; then read -r _ _ s _ < "/proc/$pid/stat"; '
    '[ "$s" = Z ] || { echo "$f"; exit 0; }; fi; done; exit 1'
)
"""Exit 0 (printing the file name) if a pid stored in any of the files ``$@`` is alive (not a
zombie), 1 if all are gone."""


def sh(script: str, *args: str, **options: object) -> Command:
    """``sh -c script sh args...``."""
    return Command(("sh", "-c", script, "sh", *args), **options)  # type: ignore[arg-type]


async def eventually(predicate: Callable[[], Awaitable[bool]], bound: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while not await predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {bound}s")
        await asyncio.sleep(POLL)


async def wait_for_file(sandbox: DockerSandbox, path: str, bound: float = 30.0) -> None:
    """Wait until ``path`` exists in the workspace."""

    async def exists() -> bool:
        try:
            await sandbox.read_file(path)
        except FileNotFoundError:
            return False
        return True

    await eventually(exists, bound, f"{path} appearing")


async def all_gone(sandbox: DockerSandbox, *pid_files: str) -> bool:
    """True if no process whose pid is in one of ``pid_files`` is still alive."""
    result = await sandbox.exec(sh(ALIVE, *pid_files))
    assert result.exit_code in (0, 1), result
    return result.exit_code == 1


async def processes(sandbox: DockerSandbox) -> list[str]:
    """The command lines of every process in the container."""
    result: ExecResult = await sandbox.exec(Command(("ps", "-o", "pid,args")))
    assert result.exit_code == 0, result
    return result.stdout.decode().splitlines()[1:]
