"""Background processes in a container: what the conformance group does not reach.

The log cap (oldest segments dropped and counted), binary-exact logs, the
exec's environment and working-directory rules, and a process whose
supervisor was killed behind mango's back (a restarted container).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.domain.errors import PathEscapeError
from mango.domain.sandbox_ports import ProcessState
from mango.domain.values import SandboxSpec
from mango_provider_docker import DockerSandbox
from mango_provider_docker.processes import PROCS_ROOT

from .conftest import make_provider
from .helpers import sh

BOUND = 20.0


@pytest.mark.docker
async def test_log_cap_drops_the_oldest_bytes_and_counts_them(
    test_image: str, resource_dir: Path, session_key: str
) -> None:
    """Past the cap the oldest segments go; offsets keep counting from the first byte."""
    provider = make_provider(resource_dir, test_image, max_process_log_bytes=800)
    try:
        sandbox = await provider.create(session_key, SandboxSpec(timeout=60.0))
        try:
            lines = b"".join(b"%04d\n" % index for index in range(1000))
            script = "i=0; while [ $i -lt 1000 ]; do printf '%04d\\n' $i; i=$((i+1)); done"
            handle = await sandbox.start(sh(script))
            info = await sandbox.wait(handle.id, timeout=BOUND)
            assert (info.state, info.exit_code) == (ProcessState.EXITED, 0)
            output = await sandbox.logs(handle.id)
            assert output.complete
            assert 0 < output.dropped == output.offset
            assert output.next_offset == len(lines)
            assert output.data == lines[output.dropped :]
            assert 700 <= len(output.data) <= 800  # the cap, less at most one segment
        finally:
            await sandbox.destroy()
    finally:
        await provider.aclose()


@pytest.mark.docker
async def test_logs_are_binary_exact_and_commands_get_the_exec_environment(
    sandbox: DockerSandbox,
) -> None:
    """NUL and high bytes survive; env and cwd are those of exec; a symlinked cwd is refused."""
    payload = bytes(range(256)) * 4
    handle = await sandbox.start(sh('cat; printf "%s|%s" "$PROBE" "$(pwd)"', stdin=payload))
    await sandbox.kill(handle.id)
    # cat echoed the initial stdin; it never reads end-of-file, so the printf never ran.
    assert (await sandbox.logs(handle.id)).data == payload
    env = await sandbox.start(
        sh('printf "%s|%s" "$PROBE" "$(pwd)"', env={"PROBE": "value"}, cwd="sub/dir")
    )
    assert (await sandbox.wait(env.id, timeout=BOUND)).state is ProcessState.EXITED
    assert (await sandbox.logs(env.id)).data == b"value|/workspace/sub/dir"
    await sandbox.exec(sh("ln -s /etc link"))
    with pytest.raises(PathEscapeError):
        await sandbox.start(sh("true", cwd="link"))


@pytest.mark.docker
async def test_a_process_whose_supervisor_died_is_reported_killed(sandbox: DockerSandbox) -> None:
    """No exit.json will ever come: the record says killed instead of running forever."""
    handle = await sandbox.start(sh("exec cat"))
    killed = await sandbox.exec(
        sh('read -r p _ < "$1/supervisor"; kill -9 "$p"', f"{PROCS_ROOT}/{handle.id}")
    )
    assert killed.exit_code == 0, killed.stderr
    info = await sandbox.wait(handle.id, timeout=BOUND)
    assert info.state is ProcessState.KILLED
    await sandbox.kill(handle.id)  # the orphaned cat goes too
